#!/usr/bin/env bash
# `sam build` of the zip function and the layer (the images need a Docker engine).
# Usage: scripts/sam_build.sh PATH_TO_SAM
set -euo pipefail
cd "$(dirname "$0")/.."
SAM="${1:-sam}"
export SAM_CLI_TELEMETRY=0
# pyenv has 3.12 on these machines but not on PATH by default: ask for it next to 3.11.
if ! python3.12 --version >/dev/null 2>&1 && command -v pyenv >/dev/null 2>&1; then
  py312="$(pyenv versions --bare 2>/dev/null | grep -E '^3\.12(\.|$)' | tail -1 || true)"
  [ -n "$py312" ] && export PYENV_VERSION="$(pyenv version-name 2>/dev/null | cut -d: -f1):$py312"
fi
if ! python3.12 --version >/dev/null 2>&1; then
  echo "sam_build.sh: skipped: sam build needs python3.12 on PATH (the functions' runtime)" >&2
  exit 0
fi
# Everything but the image functions (those need a Docker engine).
"$SAM" build --exclude InferFunction --exclude InferBatchFunction --exclude ManageEventsFunction \
  --exclude ReconcileFunction --exclude RolloutsFunction --exclude ManageApiFunction \
  --exclude CodeValidatorFunction \
  --build-dir .aws-sam/build
du -sh .aws-sam/build/CoreLayer

# Smoke test under python3.12 as Lambda lays it out: function code, then the layer's python/,
# then the runtime's own boto3. Every handler imports; ONNX Runtime from the layer runs a model.
python3.12 -m pip install -q --disable-pip-version-check --target .aws-sam/lambda-runtime boto3
for function in BatcherFunction; do
  PYTHONPATH=".aws-sam/build/$function:.aws-sam/build/CoreLayer/python:.aws-sam/lambda-runtime" \
  AWS_DEFAULT_REGION=us-east-1 python3.12 - "$function" <<'PY'
import sys

import numpy as np
import onnxruntime

import importlib.util

from onnx import TensorProto, helper

import app

handlers = sorted(name for name in dir(app) if name.endswith("handler"))
assert handlers and all(callable(getattr(app, name)) for name in handlers)
# the layer ships without the emulator (layers/core/Makefile)
assert importlib.util.find_spec("lambdaserve.local") is None, "the layer ships lambdaserve.local"
spec = [None, 4]
graph = helper.make_graph(
    [helper.make_node("Softmax", ["INPUT__0"], ["OUTPUT__0"], axis=1)],
    "softmax",
    [helper.make_tensor_value_info("INPUT__0", TensorProto.FLOAT, spec)],
    [helper.make_tensor_value_info("OUTPUT__0", TensorProto.FLOAT, spec)],
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
(probabilities,) = session.run(None, {"INPUT__0": np.ones((1, 4), np.float32)})
assert probabilities.shape == (1, 4)
print(f"sam_build.sh: {sys.argv[1]}: {', '.join(handlers)} import on python3.12; onnxruntime "
      f"{onnxruntime.__version__} ran the demo model")
PY
done
