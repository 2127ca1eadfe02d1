"""Wire protocols as codecs: KServe v2 / Open Inference Protocol (``v2``, with Triton's
binary extension; ``raw_binary``; ``generate``), TorchServe's predictions (``torchserve``,
``torchserve_errors``), TF Serving's REST (``tfserving``; ``tf_examples``: classify and
regress bodies as serialized ``tf.Example``), Paddle's pipeline
(``paddle_pipeline``), and every peer's gRPC messages (``grpc``); body limits (``limits``),
content encodings (``content_encoding``), what names, versions and labels may be
(``names``), the one map from domain errors to HTTP status (``http_status``;
``grpc.status`` for gRPC), and what a door shares with the plane about a request beyond its
body: its headers in, the answering version out (``request_headers``), and when a Lambda
invocation must have answered (``invocation``).

No framework and no domain calls here: bytes, headers, documents and messages in,
``InferRequest`` and encoded responses out (as KServe's ``protocol/infer_type``). Imports
``config`` (Triton's config messages), ``tensors`` and ``errors``.
"""
