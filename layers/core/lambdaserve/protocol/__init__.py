"""Wire protocols as codecs: KServe v2 / Open Inference Protocol (with Triton's binary
extension), TorchServe's predictions, TF Serving's REST, Paddle's pipeline; body limits,
content encodings, and the one map from domain errors to HTTP status (``http_status``).

No framework and no domain calls here: bytes, headers and documents in, ``InferRequest``
and encoded responses out (as KServe's ``protocol/infer_type``). Imports ``tensors`` and
``errors`` only.
"""
