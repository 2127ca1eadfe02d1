"""Serving a model version: resolve it from the catalog (``version_resolver``), load it through
the artifact cache (``cache``, ``loading``, ``reshaped_model``), warm it up (``warmup``),
bind requests to its signature (``binding``), a version's named signatures (``signatures``:
TF Serving's signature_name), run batches (``batch_runs``), classification
(``classification``), every response of a decoupled model (``streaming``), and the
``ModelServer`` that holds loaded versions (``model_server``, ``loaded_versions``, bounded
in bytes by their memory measured at load: ``memory``); preload and prefetch (``preload``,
``prefetch``, ``progress``); a version with code loaded before READY (``load_check``; its
event's key: ``check_event``); the dynamic batcher wired to a server (``server_batcher``);
TorchServe raw-body predictions (``raw_predictions``) and its handlers' sequences
(``handler_sequences``); payload capture (``data_capture``; every door's exchanges to it:
``capture_offers``); the data plane every door talks to (``data_plane``) and a server's
readiness (``readiness``); Triton's response cache (``response_cache``, a package);
Triton's sequence batcher with the state kept outside the instance (``sequences``, a
package); instance counts and queue policy across the Lambda fleet (``fleet_slots``, a
package); the loaded versions' worker pools
(``worker_board``); a tensor runtime's N instances (``instances``) and Triton's rate limiter
over them (``rate_limiter``); a version's Python environment, fetched with its files and
unpacked for the processes that run its code (``environments``; built at publish by
``publishing.environments``).

Imports ``batching``, ``catalog``, ``runtimes``, ``workers``, ``config``, ``protocol``,
``metrics``, ``tracing`` (the compute stamps of traced requests), ``tensors``, ``settings``
(the response cache's) and ``errors``; nothing about HTTP, Lambda or queues."""
