"""The infer function's load check: the manage function (or the dev stack) hands it a
validated version with model code, and it loads the version as a request would
(``serving.residency.load_check``). A direct Lambda invoke only: API Gateway's events never
carry the top-level key this event is routed by. pydantic is imported on this path only: a
cold start that serves requests does not pay for it."""

from __future__ import annotations

from typing import Any

from lambdaserve.catalog.store import VersionRecord
from lambdaserve.serving.model_server import ModelServer
from lambdaserve.serving.residency.check_event import EVENT_KEY
from lambdaserve.serving.residency.load_check import check_load
from lambdaserve.settings import get_settings


def handle(event: dict[str, Any], server: ModelServer) -> dict[str, Any]:
    """``{"loaded": bool, "reason": str, "environment": str}``, or ``{"error": ...}``."""
    from pydantic import BaseModel, ConfigDict, ValidationError

    class CheckLoadEvent(BaseModel):
        model_config = ConfigDict(extra="forbid")

        model: str
        version: int
        record: dict[str, Any]

    try:
        parsed = CheckLoadEvent.model_validate(event[EVENT_KEY])
        known = VersionRecord.__dataclass_fields__
        fields = {k: v for k, v in parsed.record.items() if k in known}
        fields.update(model=parsed.model, version=parsed.version)
        fields["files"] = tuple(dict(f) for f in fields.get("files", ()))
        record = VersionRecord(**fields)
    except (ValidationError, TypeError, ValueError) as exc:
        return {"error": f"not a load-check event: {exc}"}
    answer = check_load(
        server.residency, record, gpu_served_elsewhere=bool(get_settings().server_url)
    )
    return {"loaded": answer.loaded, "reason": answer.reason, "environment": answer.environment}
