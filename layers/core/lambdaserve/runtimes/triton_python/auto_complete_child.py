"""The process that runs a Python model's ``auto_complete_config``: started by
``publishing.auto_complete`` with no credentials in its environment, in a scratch directory
holding only the model's ``model.py``. Reads ``{"config": {...}}`` on stdin and writes the
completed config to ``completed.json`` (or the error to ``error.txt``, exit status 1) beside
it: files, not pipes, so a process the model's code starts cannot hold the answer back.

    python -m lambdaserve.runtimes.triton_python.auto_complete_child < request.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> int:
    request = json.loads(sys.stdin.read())
    from lambdaserve.runtimes.model_code import new_module
    from lambdaserve.runtimes.triton_python import pb_utils

    sys.modules["triton_python_backend_utils"] = pb_utils
    path = Path("model.py").resolve()
    try:
        module, loader = new_module(path, str(request["config"].get("name", "")))
        loader.exec_module(module)
        completed = module.TritonPythonModel.auto_complete_config(
            pb_utils.ModelConfig(request["config"])
        )
        if not isinstance(completed, pb_utils.ModelConfig):
            raise TypeError(
                "auto_complete_config must return the ModelConfig it was given (Triton uses "
                f"its return value), not {type(completed).__name__}"
            )
        Path("completed.json").write_text(json.dumps(completed.as_dict()))
    except Exception as exc:
        Path("error.txt").write_text(f"{type(exc).__name__}: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
