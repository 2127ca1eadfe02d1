"""The gRPC doors: one servicer module per peer's service (KServe v2 / Triton, TF Serving,
TorchServe, Paddle's pipeline), each a codec (``protocol.grpc``) over the same data plane as
the HTTP routes (``serving.data_plane``); ``server`` runs them on one port in the HTTP server's
event loop, with ``grpc.health.v1`` beside them.
"""
