"""Where model code is checked before it may be READY: the environment that serves it.

The manage function never runs model code. After a version with code (a TorchServe handler
or archive, a Python model, a Paddle pipeline, a workflow) passes the static checks, the
registrar asks the serving environment to load it — import, ``initialize``, warm-up — with a
small event the infer function's entry point routes (``handlers.load_check``):

- deployed: a direct invoke of the infer function (``LAMBDASERVE_SERVING_CHECK_FUNCTION``;
  the template lets the manage functions invoke it and nothing else of it);
- locally: the dev stack's infer process, given the same event in-process.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from lambdaserve.catalog.store import VersionRecord
from lambdaserve.serving.residency.check_event import EVENT_KEY


@dataclass(frozen=True)
class CheckAnswer:
    """``reason`` empty: it loaded there. ``environment`` says where it was checked."""

    reason: str
    environment: str


class ServingCheck(Protocol):
    def check(self, record: VersionRecord) -> CheckAnswer:
        """Load ``record`` where it serves; the code's own error as the reason otherwise."""
        ...


def check_event(record: VersionRecord) -> dict[str, Any]:
    """The event that asks the infer function to load ``record``."""
    fields = {**record.__dict__, "files": [dict(f) for f in record.files]}
    return {EVENT_KEY: {"model": record.model, "version": record.version, "record": fields}}


def _answer(document: dict[str, Any], where: str) -> CheckAnswer:
    if "error" in document or "loaded" not in document:
        reason = document.get("error") or document.get("errorMessage") or "no answer"
        return CheckAnswer(f"the serving environment could not check it: {reason}", where)
    return CheckAnswer(
        "" if document["loaded"] else str(document.get("reason") or "it failed to load"),
        str(document.get("environment") or where),
    )


class InProcessCheck:
    """The dev stack: the infer side of this process, through the same entry point."""

    def __init__(self, handle: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        self._handle = handle

    def check(self, record: VersionRecord) -> CheckAnswer:
        return _answer(self._handle(check_event(record)), "the infer process")


class InferFunctionCheck:
    """Deployed: a synchronous invoke of the infer function."""

    def __init__(self, lambda_client: Any, function_name: str) -> None:
        self._lambda = lambda_client
        self._function = function_name

    def check(self, record: VersionRecord) -> CheckAnswer:
        response = self._lambda.invoke(
            FunctionName=self._function, Payload=json.dumps(check_event(record)).encode()
        )
        document = json.loads(response["Payload"].read() or b"{}")
        if response.get("FunctionError"):
            document = {"error": document.get("errorMessage") or "the function failed"}
        return _answer(document, f"the infer function {self._function}")
