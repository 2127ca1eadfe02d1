"""The long-running processes of ECS tasks: ``lambdaserve serve`` (``serve``; with
``--workers N``, N replicas: ``supervisor``, ``serve_replica``, ``replica_contract``,
``siblings``) and ``lambdaserve worker``, the SQS consumer (``queue_consumer``); the SQS event
pump with Lambda's event source mapping semantics (``event_pump``), background uvicorn servers
(``background``), text logs, and the ASGI middlewares only these servers use (``asgi``: front
door, slow clients, access log, lifespan, TorchServe's metrics API).

Takes its objects from the composition root (``wiring.process``); never imports ``handlers``
(``make lint`` checks).
"""
