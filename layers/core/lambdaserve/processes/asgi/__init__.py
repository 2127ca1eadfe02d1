"""The ASGI middlewares only the long-running server uses: the front door for the hot
routes, slow-client timeouts, a response's writes in one send (``coalesced_writes``), the
access log, the lifespan steps, the caller's trace context
(``trace_context``), TorchServe's metrics API."""
