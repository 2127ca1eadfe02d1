"""What a TorchServe handler sees of its server: the ``context`` and how answers are sent.

Used where TorchServe's ``ts`` package is not installed (where it is, TorchServe's own
``Context`` is). Available as in TorchServe: ``model_name``, ``manifest``, ``model_yaml_config``,
``system_properties`` (``model_dir``, ``gpu_id``, ``batch_size``, ``limit_max_image_pixels``,
``server_name``, ``server_version``),
``get_request_header``, ``get_all_request_header``, ``set_response_content_type``,
``get_response_content_type``, ``set_response_status``. Not available: ``context.metrics``
(None; lambdaserve's own metrics cover each call) and ``request_processor`` internals.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from lambdaserve import __version__


@dataclass(frozen=True)
class Answer:
    """One request's answer as bytes, with the content type to send it with."""

    body: bytes
    content_type: str
    status: int = 200


# TorchServe's sequence headers (its Context reads the id; the frontend answers it)
SEQUENCE_ID_HEADER = "ts_request_sequence_id"
SEQUENCE_END_HEADER = "ts_request_sequence_end"


class Context:
    """TorchServe's ``context`` argument, over one loaded version."""

    metrics = None

    def __init__(
        self,
        model: str,
        version: int,
        model_dir: Path,
        batch_size: int,
        manifest: dict[str, Any] | None = None,
    ) -> None:
        self.model_name = model
        self.model_dir = model_dir
        self.manifest: dict[str, Any] = manifest or {
            "model": {"modelName": model, "modelVersion": str(version), "handler": "handler.py"},
            "runtime": "python",
        }
        self.system_properties: dict[str, Any] = {
            "model_dir": str(model_dir),
            "gpu_id": None,
            "batch_size": max(1, batch_size),
            "limit_max_image_pixels": True,
            "server_name": "lambdaserve",
            "server_version": __version__,
        }
        self.model_yaml_config = _model_yaml_config(self.manifest, model_dir)
        self._headers: list[Mapping[str, str]] = []
        self._content_types: dict[int, str] = {}
        self._statuses: dict[int, tuple[int, str]] = {}

    def begin(self, headers: list[Mapping[str, str]]) -> None:
        """A new call: the request headers of its rows, no answers decided yet."""
        self._headers = headers
        self._content_types = {}
        self._statuses = {}

    def get_request_header(self, idx: int, key: str) -> str | None:
        headers = self._headers[idx] if idx < len(self._headers) else {}
        return headers.get(key.lower())

    def get_sequence_id(self, idx: int) -> str | None:
        """TorchServe's: the ``ts_request_sequence_id`` of request ``idx`` (its frontend
        gives one to a request of a ``sequenceBatching`` model that came without)."""
        return self.get_request_header(idx, SEQUENCE_ID_HEADER)

    def get_all_request_header(self, idx: int) -> dict[str, str]:
        return dict(self._headers[idx]) if idx < len(self._headers) else {}

    def set_response_content_type(self, idx: int, value: str) -> None:
        self._content_types[idx] = value

    def get_response_content_type(self, idx: int) -> str | None:
        return self._content_types.get(idx)

    def set_response_status(self, code: int = 200, phrase: str = "", idx: int = 0) -> None:
        self._statuses[idx] = (code, phrase)

    def answer(self, idx: int, result: Any) -> Answer:
        """Row ``idx``'s result as sent: bytes as they are, text as text, anything else as
        JSON (TorchServe's defaults), unless the handler set the content type or status."""
        status = self._statuses.get(idx, (200, ""))[0]
        return encode_answer(result, self._content_types.get(idx), status)


def encode_answer(result: Any, chosen: str | None, status: int) -> Answer:
    """A handler's result as TorchServe's worker sends it: bytes as they are, text as UTF-8,
    anything else as JSON; ``chosen`` is the content type the handler set, if any."""
    if isinstance(result, bytes | bytearray | memoryview):
        return Answer(bytes(result), chosen or "application/octet-stream", status)
    if isinstance(result, str):
        return Answer(result.encode(), chosen or "text/plain; charset=utf-8", status)
    body = orjson.dumps(result, option=orjson.OPT_SERIALIZE_NUMPY)
    return Answer(body, chosen or "application/json", status)


def _model_yaml_config(manifest: dict[str, Any], model_dir: Path) -> dict[str, Any]:
    """The archive's ``model-config.yaml`` (manifest ``configFile``), as TorchServe reads it."""
    name = (manifest.get("model") or {}).get("configFile")
    if not name:
        return {}
    import yaml

    document = yaml.safe_load((model_dir / name).read_bytes())
    return document if isinstance(document, dict) else {}
