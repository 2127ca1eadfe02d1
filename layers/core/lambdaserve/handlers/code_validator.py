"""The code-validator function: a Python model's ``auto_complete_config``, run for the manage
functions with a role that allows nothing (``publishing.auto_complete``); and a model's
requirements built into an environment, stored through the presigned URL the event carries
(``publishing.environments``), for the Python and pins this image reports
(``publishing.environments.serving_target``: this function runs the infer image, the one
that serves)."""

from __future__ import annotations

import base64
from typing import Any

from pydantic import BaseModel, ValidationError

from lambdaserve.errors import ModelRejected
from lambdaserve.publishing.auto_complete import IsolatedProcess
from lambdaserve.publishing.environments.build import BuildRequest
from lambdaserve.publishing.environments.builders import IsolatedBuilder


class CompletionEvent(BaseModel):
    model_py: str  # base64
    config: dict[str, Any]


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    if "target" in event:  # this image's pins: environments are built for them
        return IsolatedBuilder().target()
    if "environment" in event:
        try:
            request = BuildRequest.model_validate(event["environment"])
        except ValidationError as exc:
            return {"error": f"not an environment build event: {exc}"}
        return IsolatedBuilder().build(request)
    try:
        parsed = CompletionEvent.model_validate(event)
        source = base64.b64decode(parsed.model_py, validate=True)
    except (ValidationError, ValueError) as exc:
        return {"error": f"not a code-validator event: {exc}"}
    try:
        return {"config": IsolatedProcess().complete(source, parsed.config)}
    except ModelRejected as exc:
        return {"error": exc.message}
