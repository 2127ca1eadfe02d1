"""Wire protocols as codecs: KServe v2 / Open Inference Protocol (with Triton's binary
extension), TorchServe's predictions, TF Serving's REST, Paddle's pipeline, and every peer's
gRPC messages (``grpc``); body limits, content encodings, what names, versions and labels may
be (``names``), and the one map from domain errors to HTTP status (``http_status``;
``grpc.status`` for gRPC).

No framework and no domain calls here: bytes, headers, documents and messages in,
``InferRequest`` and encoded responses out (as KServe's ``protocol/infer_type``). Imports
``config`` (Triton's config messages), ``tensors`` and ``errors``.
"""
