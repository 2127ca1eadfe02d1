"""Publishing a model: what the manage function does with an upload. Validation with
the runtime that will serve it (``validation``; ``auto_complete``: Triton's
``auto_complete_config()`` run isolated, with a child's environment from
``bare_environment``), reconciling the catalog with the bucket (``registrar``; ``uploads``,
``config_reader``, ``version_states``, ``version_labels``, ``watchers``), one delivery of
events (``events``), TorchServe archives unpacked into versions (``archives``,
``version_archives``), model code loaded where it serves before READY (``serving_check``),
and the management API's domain: load, unload, default version, labels, config overrides
(``management``); model environments, a package of their own: model code's requirements
built into environments by the sandbox, wheels only, and Triton's conda-pack environments
(``environments``).

Imports ``pipelines``, ``serving`` (the same warm-up check), ``catalog`` and below; never
runs user code unless a validator is configured to.
"""
