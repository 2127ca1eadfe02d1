"""Routes and servicers over the data plane: the inference API (v2, TorchServe, TF Serving,
Paddle routes), the one v2 infer door every transport calls (``v2_calls``), the management
API, metrics routes, OpenAPI, and the gRPC servicers (``grpc``).

Imports the domain rooms (``serving``, ``queued``, ``publishing``, ``batching``, ``metrics``,
``protocol``) and below; never ``handlers``, ``wiring``, ``processes`` or ``local``.
"""
