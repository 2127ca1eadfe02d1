"""Serving a model version: resolve it from the catalog (``version_resolver``), hold it
loaded (``residency``, a package: load through the artifact cache ``cache``, warm-up, the
LRU bounded in bytes, preload and prefetch, the load check before READY), bind requests to
its signature (``binding``), a version's named signatures (``signatures``: TF Serving's
signature_name), run batches (``batch_runs``) in the scope every execution has (``execution``),
classification (``classification``), every
response of a decoupled model (``streaming``), and the ``ModelServer`` that executes requests
(``model_server``); the dynamic batcher wired to a server (``server_batcher``); TorchServe
raw-body predictions (``raw_predictions``) and its handlers' sequences
(``handler_sequences``); payload capture (``capture``, a package); the data plane every door
talks to (``data_plane``) and a server's readiness (``readiness``); Triton's response cache
(``response_cache``, a package); Triton's sequence batcher with the state kept outside the
instance (``sequences``, a package); instance counts and queue policy across the Lambda
fleet (``fleet_slots``, a package); the loaded versions' worker pools (``worker_board``); a
tensor runtime's N instances (``instances``) and Triton's rate limiter over them
(``rate_limiter``).

Imports ``batching``, ``catalog``, ``runtimes``, ``workers``, ``config``, ``protocol``,
``metrics``, ``tracing`` (the compute stamps of traced requests), ``tensors``, ``settings``
(the response cache's) and ``errors``; nothing about HTTP, Lambda or queues."""
