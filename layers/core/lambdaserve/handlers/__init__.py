"""Lambda entry points (thin): parse the event, call one domain function, shape the reply.
The functions: ``manage``, ``infer``, ``batcher``, ``code_validator``, the rollouts judge
(``rollouts``); the infer function's
``load_check`` and SnapStart hooks (``snapstart``); the events they read: API Gateway's
HTTP API (``http_api``) and S3 notifications (``s3_events``); their traces, X-Ray through
Powertools' Tracer where the template's ``Tracing`` is on (``xray``).

``functions/*/app.py`` re-export these so SAM's ``Handler: app.<name>`` resolves,
and the local stack calls the very same callables. Each takes this process's objects from
``wiring.process``; imports ``apps``, ``wiring`` and below.
"""
