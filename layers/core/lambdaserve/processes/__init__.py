"""The long-running processes of ECS tasks: ``lambdaserve serve`` (``serve``) and
``lambdaserve worker`` (``worker``); the SQS event pump with Lambda's event source mapping
semantics (``event_pump``), background uvicorn servers (``background``), text logs, and the
ASGI middlewares only these servers use (``asgi``: front door, slow clients, access log,
lifespan, TorchServe's metrics API).

Takes its objects from the composition root (``wiring.process``); never imports ``handlers``
(``make lint`` checks).
"""
