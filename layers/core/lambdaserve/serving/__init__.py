"""Serving a model version: resolve it from the catalog (``version_resolver``), load it
through the artifact cache (``cache``, ``loading``, ``reshaped_model``), warm it up, bind
requests to its signature, run batches (``batch_runs``), classification, and the
``ModelServer`` that holds loaded versions (``model_server``); preload and prefetch; the
dynamic batcher wired to a server (``server_batcher``); TorchServe raw-body predictions; the
data plane every door talks to (``data_plane``); a version's Python environment, fetched
with its files and unpacked for the processes that run its code (``environments``; built at
publish by ``publishing.environments``); Triton's response cache (``response_cache/``).

Imports ``batching``, ``catalog``, ``runtimes``, ``config``, ``protocol``, ``metrics``,
``tensors``; nothing about HTTP, Lambda or queues.
"""
