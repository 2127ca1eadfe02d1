"""The ASGI middlewares only the long-running server uses: the front door for the hot
routes, slow-client timeouts, the access log, the lifespan steps, the caller's trace context
(``trace_context``), TorchServe's metrics API."""
