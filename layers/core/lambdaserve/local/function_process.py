"""One Lambda execution environment of a function: its own interpreter, the function's code
(the image's task root, or the zip's code and layer) first on ``sys.path``, kept warm across
invocations as Lambda keeps it. Events go in on stdin, one JSON line each; the handler's
result comes back on a marked line (the function's own logs go to its log file, as to
CloudWatch)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from lambdaserve.local.lambda_service import FunctionFailed

_MARK = "HANDLER-RESULT "
# The runtime loop: Lambda's bootstrap reduced to what a handler sees (event, context).
RUNTIME = f"""
import json, os, sys, traceback
sys.path[:0] = json.loads(sys.argv[1])
import app
from lambdaserve.processes.event_pump import LocalContext

for line in sys.stdin:
    call = json.loads(line)
    if call.get("trace"):  # Lambda's runtime: the invocation's X-Ray trace header
        os.environ["_X_AMZN_TRACE_ID"] = call["trace"]
    else:
        os.environ.pop("_X_AMZN_TRACE_ID", None)
    try:
        result = getattr(app, call["handler"])(call["event"], LocalContext(call["function"]))
        answer = {{"result": result}}
    except Exception:
        answer = {{"error": traceback.format_exc()}}
    sys.stdout.write({_MARK!r} + json.dumps(answer) + "\\n")
    sys.stdout.flush()
"""


def base_environment() -> dict[str, str]:
    """What Lambda's runtime sets besides the function's variables (its PATH, locale, home)."""
    kept = ("PATH", "HOME", "LANG", "LC_ALL", "TZ")
    return {k: os.environ[k] for k in kept if k in os.environ}


class FunctionProcess:
    """A function's handlers in ``python`` (the interpreter's command) with ``paths`` first
    on its ``sys.path`` and ``code`` (where ``app.py`` is) as its working directory, invoked
    one event at a time; its environment is exactly ``environment``. Its log (``log``) holds
    what it writes to stdout and stderr."""

    def __init__(
        self,
        name: str,
        python: Sequence[str],
        *,
        paths: Sequence[str],
        code: Path,
        environment: Mapping[str, str],
        log: Path,
    ) -> None:
        self.name = name
        self.log_path = log
        self._one_at_a_time = threading.Lock()
        self._log: IO[str] = log.open("w")
        self._process = subprocess.Popen(
            [*python, "-c", RUNTIME, json.dumps(list(paths))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            cwd=code,
            env=dict(environment),
        )

    @property
    def pid(self) -> int:
        """The execution environment's process (model-code workers are its children)."""
        return self._process.pid

    def invoke(self, handler: str, event: dict[str, Any], trace: str | None = None) -> Any:
        """``event`` to ``handler``; ``trace``: the invocation's X-Ray trace header, as
        Lambda's runtime hands it over (``_X_AMZN_TRACE_ID``)."""
        with self._one_at_a_time:  # one execution environment: one event at a time
            return self._invoke(handler, event, trace)

    def _invoke(self, handler: str, event: dict[str, Any], trace: str | None) -> Any:
        # Lambda's own lines around each invocation in the function's log, as CloudWatch has them
        request_id, started = str(uuid.uuid4()), time.monotonic()
        self._say(f"START RequestId: {request_id} Version: $LATEST\n")
        try:
            return self._answer(handler, event, trace)
        finally:
            elapsed_ms = (time.monotonic() - started) * 1000
            self._say(f"END RequestId: {request_id}\n")
            self._say(f"REPORT RequestId: {request_id}\tDuration: {elapsed_ms:.2f} ms\n")

    def _say(self, line: str) -> None:
        self._log.write(line)
        self._log.flush()

    def _answer(self, handler: str, event: dict[str, Any], trace: str | None) -> Any:
        assert self._process.stdin is not None and self._process.stdout is not None
        call = {"handler": handler, "event": event, "function": self.name, "trace": trace}
        try:
            self._process.stdin.write(json.dumps(call) + "\n")
            self._process.stdin.flush()
        except BrokenPipeError:
            raise FunctionFailed(f"{self.name} exited:\n{self.log_tail()}") from None
        for line in self._process.stdout:
            if line.startswith(_MARK):
                answer = json.loads(line.removeprefix(_MARK))
                if "error" in answer:
                    raise FunctionFailed(f"{self.name}.{handler} raised:\n{answer['error']}")
                return answer["result"]
            # what the function prints (Powertools' logger writes to stdout): its log, as
            # Lambda sends stdout and stderr to CloudWatch
            self._say(line)
        raise FunctionFailed(f"{self.name} exited:\n{self.log_tail()}")

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def handler(self, name: str) -> Any:
        """``invoke`` as a handler function (event, context), for the event pump."""
        return lambda event, _context: self.invoke(name, event)

    def close(self) -> None:
        assert self._process.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # an environment that already exited
            self._process.stdin.close()
        try:
            self._process.wait(30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._log.close()

    def __enter__(self) -> FunctionProcess:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
