"""Publishing a model: what the manage function does with an upload. Validation with
the runtime that will serve it (``validation``), reconciling the catalog with the bucket
(``registrar``), one delivery of events (``events``), TorchServe archives unpacked into
versions (``archives``), and the management API's domain: load, unload, default version, labels,
config overrides (``management``); model environments, a folder of their own: model code's
requirements built into environments by the sandbox, wheels only (``environments/``).

Imports ``pipelines``, ``serving`` (the same warm-up check), ``catalog`` and below; never
runs user code unless a validator is configured to.
"""
