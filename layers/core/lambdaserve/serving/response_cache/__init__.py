"""Triton's response cache: answers a model has given before, served again without running
it. The key and the lookups before a load, the store of successes (``lookups``); where
entries live, this process's memory and Redis (``tiers``); an entry's bytes, data only
(``codec``); the cache a process runs with, from settings and ``--cache-config``
(``from_settings``).

Imports ``serving.version_resolver`` (a version's fingerprint), ``protocol``, ``metrics``,
``tensors``; nothing about HTTP, Lambda or queues.
"""
