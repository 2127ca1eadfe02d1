"""Triton's ``auto_complete_config`` at publish, without running the model's code in the
manage function: a Python model that defines it is handed its config in a validator that can
read nothing else (Triton calls it before the model loads, to fill in what the config leaves
out: tensors, ``max_batch_size``, a dynamic batcher, ``decoupled``).

- Deployed: the code-validator function, a Lambda whose role allows only its own logs, given
  ``model.py`` and the config in the event (``ValidatorFunction``).
- Locally, and inside that function: a child process with no AWS credentials or lambdaserve
  settings in its environment, in a scratch directory holding only ``model.py``, under a time
  limit (``IsolatedProcess``).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from lambdaserve.config.model_config import ModelConfig, build
from lambdaserve.errors import InvalidInput, ModelRejected
from lambdaserve.publishing.bare_environment import bare_environment
from lambdaserve.runtimes.model_code import outline

# What auto_complete_config may fill in (python_backend's ModelConfig setters).
COMPLETED_FIELDS = ("input", "output", "max_batch_size", "dynamic_batching")
TIMEOUT_S = 60.0


class Completer(Protocol):
    def complete(self, model_py: bytes, config: dict[str, Any]) -> dict[str, Any]:
        """The config ``auto_complete_config`` returned, or ModelRejected saying why."""
        ...


def declares_auto_complete(model_py: Path) -> bool:
    methods = outline(model_py).classes.get("TritonPythonModel", frozenset())
    return "auto_complete_config" in methods


def completed_fields(config: ModelConfig, completed: dict[str, Any]) -> dict[str, Any]:
    """The fields the model filled in, in Triton's JSON form (stored beside the config)."""
    fields = {k: completed[k] for k in COMPLETED_FIELDS if k in completed}
    policy = completed.get("model_transaction_policy") or {}
    if policy.get("decoupled"):
        fields["model_transaction_policy"] = {"decoupled": True}
    return fields


def apply_completion(config: ModelConfig, fields: dict[str, Any]) -> ModelConfig:
    """``config`` with what auto_complete_config filled in."""
    try:
        filled = build({"name": config.name, "backend": "python", **fields}, config.name)
    except InvalidInput as exc:
        raise ModelRejected(
            f"auto_complete_config returned an invalid config: {exc.message}"
        ) from None
    return replace(
        config,
        inputs=filled.inputs,
        outputs=filled.outputs,
        max_batch_size=filled.max_batch_size,
        dynamic_batching=filled.dynamic_batching or config.dynamic_batching,
        decoupled=filled.decoupled or config.decoupled,
    )


class IsolatedProcess:
    """auto_complete_config in a child process that holds no credentials."""

    def __init__(self, timeout_s: float = TIMEOUT_S) -> None:
        self._timeout_s = timeout_s

    def complete(self, model_py: bytes, config: dict[str, Any]) -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="auto-complete-") as scratch:
            (Path(scratch) / "model.py").write_bytes(model_py)
            with tempfile.TemporaryFile() as stdin:  # not in the scratch: model.py alone
                stdin.write(json.dumps({"config": config}).encode())
                stdin.seek(0)
                process = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "lambdaserve.runtimes.triton_python.auto_complete_child",
                    ],
                    stdin=stdin,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    cwd=scratch,
                    env=_bare_environment(scratch),
                    start_new_session=True,  # its own group: whatever it starts ends with it
                )
            try:
                process.wait(self._timeout_s)
            except subprocess.TimeoutExpired:
                raise ModelRejected(
                    f"auto_complete_config of model.py ran over {self._timeout_s:.0f} s"
                ) from None
            finally:
                _end_group(process)
                _end_strays(scratch)
            return _answer(Path(scratch), process.returncode)


class ValidatorFunction:
    """auto_complete_config in the code-validator Lambda (its role reads nothing)."""

    def __init__(self, lambda_client: Any, function_name: str) -> None:
        self._lambda = lambda_client
        self._function = function_name

    def complete(self, model_py: bytes, config: dict[str, Any]) -> dict[str, Any]:
        event = {"model_py": base64.b64encode(model_py).decode(), "config": config}
        response = self._lambda.invoke(
            FunctionName=self._function, Payload=json.dumps(event).encode()
        )
        answer = json.loads(response["Payload"].read() or b"{}")
        if response.get("FunctionError") or "error" in answer:
            reason = answer.get("error") or answer.get("errorMessage") or "the validator failed"
            raise ModelRejected(str(reason))
        document: dict[str, Any] = answer["config"]
        return document


def _bare_environment(scratch: str) -> dict[str, str]:
    """Enough to start Python and import what this process can: no AWS_*, no LAMBDASERVE_*."""
    return bare_environment(
        scratch,
        ("LD_LIBRARY_PATH",),
        PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
        PYTHONDONTWRITEBYTECODE="1",
    )


def _end_group(process: subprocess.Popen[Any]) -> None:
    """The child and every process it started in its group, killed and reaped."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(5)


def _end_strays(scratch: str) -> None:
    """Processes that left the group (setsid) but still work in the scratch directory."""
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if os.readlink(entry / "cwd").startswith(scratch):
                os.kill(int(entry.name), signal.SIGKILL)


def _answer(scratch: Path, status: int | None) -> dict[str, Any]:
    completed, error = scratch / "completed.json", scratch / "error.txt"
    if status == 0 and completed.is_file():
        document: dict[str, Any] = json.loads(completed.read_text())
        return document
    reason = error.read_text()[:500] if error.is_file() else f"exit status {status}"
    raise ModelRejected(f"auto_complete_config of model.py failed: {reason}")
