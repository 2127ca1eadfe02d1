"""Publishing a model: what the manage function does with an upload. Validation with
the runtime that will serve it (``validation``; ``auto_complete``: Triton's
``auto_complete_config()`` run isolated), reconciling the catalog with the bucket
(``registrar``; ``uploads``, ``config_reader``, ``version_states``), one delivery of events
(``events``), TorchServe archives unpacked into versions (``archives``,
``version_archives``), model code loaded where it serves before READY (``serving_check``),
and the management API's domain: load, unload, default version, labels, config overrides
(``management``); model code's requirements built into environments by the sandbox, wheels
only (``environments``, ``environment_builders``, ``environment_build``, ``requirements``,
``pip_reasons``, ``serving_target``, ``bare_environment``), and Triton's conda-pack
environments (``conda_environments``).

Imports ``pipelines``, ``serving`` (the same warm-up check), ``catalog`` and below; never
runs user code unless a validator is configured to.
"""
