"""The ASGI middlewares only the long-running server uses: the front door for the hot
routes, slow-client timeouts, the access log, the lifespan steps, TorchServe's metrics API."""
