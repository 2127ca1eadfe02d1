#!/usr/bin/env bash
# Regenerate the Python stubs of lambdaserve's gRPC protos (layers/core/lambdaserve/protocol/
# grpc/protos/*.proto) beside them. grpcio-tools 1.75-1.81 generate code for protobuf 6 (the
# runtime the package pins); 1.82 and later generate for protobuf 7.
#   scripts/generate_grpc_stubs.sh [PYTHON]   (default: .venv/bin/python, with grpcio-tools)
set -euo pipefail
cd "$(dirname "$0")/../layers/core"
PY=${1:-../../.venv/bin/python}
"$PY" -m grpc_tools.protoc -I . \
  --python_out=. --grpc_python_out=. --pyi_out=. \
  lambdaserve/protocol/grpc/protos/*.proto
# The TensorFlow Serving protos declare TensorFlow's own names: built into their own pool
# (protos/pool.py), never the default one, so TensorFlow can be imported beside them.
for generated in lambdaserve/protocol/grpc/protos/tensorflow_*_pb2.py; do
  sed -i -e 's/^DESCRIPTOR = _descriptor_pool.Default().AddSerializedFile(/DESCRIPTOR = _POOL.AddSerializedFile(/' \
    -e 's/^_sym_db = _symbol_database.Default()$/&\nfrom lambdaserve.protocol.grpc.protos.pool import POOL as _POOL/' \
    "$generated"
done
echo "generated: $(ls lambdaserve/protocol/grpc/protos/*_pb2*.py* | wc -l) files"
