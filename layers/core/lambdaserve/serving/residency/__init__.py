"""Which versions a process holds loaded, and getting them there (``residency``: load,
scale, unload, let go of what the catalog stops serving, a failed load recorded as the
version's state).

A version loads through the artifact cache (``loading``; its Python environment fetched and
unpacked beside its files: ``environments``; a reshaped signature: ``reshaped_model``) and is
warmed up (``warmup``); the loaded ones are an LRU bounded by count and by bytes measured at
load (``loaded_versions``, ``memory``; sizes written for people: ``progress``). Ahead of
requests: the default versions loaded before a snapshot or readiness (``preload``), and
new versions' files fetched on publish (``prefetch``). A version with code is loaded where
it serves before it is READY (``load_check``; its event's key: ``check_event``).

Imports ``catalog``, ``config``, ``runtimes``, ``workers``, ``batching``, ``metrics``,
``protocol``, ``tensors``, ``errors`` and ``serving``'s cache, instances, binding, rate
limiter, version resolver and sequence controls; never ``serving.model_server`` (which
executes over what this package holds)."""
