"""Where a model environment is built: the sandbox, never the manage function.

- Deployed: the code-validator function (``FunctionBuilder``), whose role allows nothing; it
  runs the same child as below (``handlers.code_validator``).
- Locally and inside that function: a child process without credentials or lambdaserve
  settings, in its own process group (``IsolatedBuilder``).

Either answers what ``build.build`` returned, or ``{"error": reason}``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from typing import Any, Protocol

from lambdaserve.errors import ModelRejected
from lambdaserve.publishing.bare_environment import bare_environment
from lambdaserve.publishing.environments.build import PIP_KEPT, PIP_TIMEOUT_S, BuildRequest


class Builder(Protocol):
    def build(self, request: BuildRequest) -> dict[str, Any]:
        """The sandbox's answer: packages, bytes, unpacked_bytes, sha256; or error."""
        ...

    def target(self) -> dict[str, Any]:
        """``{"target": ...}``: the Python, platform and pins of the environment the sandbox
        runs in, which is the serving one (``publishing.environments.serving_target``)."""
        ...


class IsolatedBuilder:
    """The build in a child process with no AWS credentials or lambdaserve settings;
    ``site_dirs`` go first on its path (the site-packages of another environment on this
    machine that serves the models, whose pins then hold; none: this process's own)."""

    def __init__(self, site_dirs: tuple[str, ...] = ()) -> None:
        self._site_dirs = site_dirs

    def build(self, request: BuildRequest) -> dict[str, Any]:
        return self._child(
            "lambdaserve.publishing.environments.build", request.model_dump_json().encode()
        )

    def target(self) -> dict[str, Any]:
        return self._child("lambdaserve.publishing.environments.serving_target", b"")

    def _child(self, module: str, stdin: bytes) -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="environment-build-") as home:
            environment = bare_environment(
                home,
                PIP_KEPT,
                PYTHONPATH=os.pathsep.join([*self._site_dirs, *(p for p in sys.path if p)]),
                PYTHONDONTWRITEBYTECODE="1",
            )
            process = subprocess.Popen(
                [sys.executable, "-m", module],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=home,
                env=environment,
                start_new_session=True,  # its own group: pip's children end with it
            )
            try:
                out, err = process.communicate(stdin, timeout=2 * PIP_TIMEOUT_S + 60)
            except subprocess.TimeoutExpired:
                raise ModelRejected("building the environment ran over its time limit") from None
            finally:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        try:
            answer: dict[str, Any] = json.loads(out or b"{}")
        except ValueError:
            answer = {}
        if not answer:
            tail = err.decode(errors="replace").strip().splitlines()[-1:] or ["no answer"]
            raise RuntimeError(f"the environment builder failed: {tail[0]}")
        return answer


class FunctionBuilder:
    """The build in the code-validator Lambda (its role reads and writes nothing)."""

    def __init__(self, lambda_client: Any, function_name: str) -> None:
        self._lambda = lambda_client
        self._function = function_name

    def build(self, request: BuildRequest) -> dict[str, Any]:
        return self._invoke({"environment": request.model_dump()})

    def target(self) -> dict[str, Any]:
        return self._invoke({"target": {}})

    def _invoke(self, event: dict[str, Any]) -> dict[str, Any]:
        response = self._lambda.invoke(
            FunctionName=self._function, Payload=json.dumps(event).encode()
        )
        answer: dict[str, Any] = json.loads(response["Payload"].read() or b"{}")
        if response.get("FunctionError"):
            raise RuntimeError(f"the environment builder failed: {answer.get('errorMessage')}")
        return answer
