"""Triton's Python models (python_backend): ``model.py`` run with our ``pb_utils``
(``triton_python_backend_utils``), decoupled responses, and ``auto_complete_config`` run in
an isolated child process."""
