"""ASGI apps over the domain: the inference API (v2, TorchServe, TF Serving, Paddle routes),
the management API, metrics routes, OpenAPI, and the middleware of the long-running servers
(front door, slow clients, access log).

Imports the domain rooms (``serving``, ``queued``, ``publishing``, ``batching``, ``metrics``,
``protocol``) and below; never ``handlers``, ``server`` or ``local``.
"""
