"""The long-running processes of ECS tasks: ``lambdaserve serve`` (``serve``, its banner
``serve_banner``, its garbage collector ``gc_tuning``, its drain on SIGTERM ``drain``; with
``--workers N``, N replicas: ``supervisor``, ``serve_replica``, what they agree on
``replica_contract`` and share ``siblings``; the trace flags ``trace_flags``, the rate
limiter's ``rate_limit_flags``, both read from a task definition's variables by
``flags_from_env``) and ``lambdaserve
worker``, the SQS consumer (``queue_consumer``); the SQS event pump with Lambda's event source
mapping semantics (``event_pump``), background uvicorn servers (``background``), text logs
(``logs``), and the ASGI middlewares only these servers use (``asgi``: front door, slow
clients, access log, lifespan, TorchServe's metrics API); and ``lambdaserve rollout``, a
client of the management API's rollout routes (``rollout_command``).

Takes its objects from the composition root (``wiring.process``); never imports ``handlers``
(``make lint`` checks).
"""
