"""gRPC codecs, one module per peer's service: protobuf messages to the domain's requests and
back, and the one map from domain errors to gRPC status codes (``status``).

Messages come from the peers' published protos: Triton's from ``tritonclient`` (which ships
``grpc_service_pb2``), TF Serving's, TorchServe's and Paddle's generated into ``protos/``
from their ``.proto`` files (``scripts/generate_grpc_stubs.sh``). No server here: the servicers
live in ``apps/grpc``.
"""
