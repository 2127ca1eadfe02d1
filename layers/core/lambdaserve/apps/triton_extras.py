"""Triton's shared-memory and logging extensions, answered as a server without shared
memory would: status lists nothing, unregister succeeds, register is a 400 that says why,
and log settings map onto lambdaserve's log level. Stock clients call these; a 404 would
stop them. (The trace extension is ``trace_settings``.)"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request

from lambdaserve.apps.json_body import json_object
from lambdaserve.errors import InvalidInput

_KINDS = {"systemsharedmemory": "system", "cudasharedmemory": "CUDA"}


def install_triton_extras(app: FastAPI) -> None:
    for kind, word in _KINDS.items():
        _install_shared_memory(app, kind, word)

    @app.get("/v2/logging", include_in_schema=False)
    async def current_log_settings() -> dict[str, Any]:
        return log_settings()

    @app.post("/v2/logging", include_in_schema=False)
    async def update_log_settings(request: Request) -> dict[str, Any]:
        body = await json_object(request)
        level = log_level(body)
        if level is not None:
            logging.getLogger("lambdaserve").setLevel(level)
        return log_settings()


def _install_shared_memory(app: FastAPI, kind: str, word: str) -> None:
    async def status(name: str | None = None) -> list[dict[str, Any]]:
        if name is not None:
            raise unknown_region(word, name)
        return []

    async def unregister(name: str | None = None) -> dict[str, Any]:
        return {}

    async def register(name: str) -> dict[str, Any]:
        raise shared_memory_refusal(word)

    base = f"/v2/{kind}"
    app.add_api_route(f"{base}/status", status, methods=["GET"], include_in_schema=False)
    app.add_api_route(
        f"{base}/region/{{name}}/status", status, methods=["GET"], include_in_schema=False
    )
    app.add_api_route(f"{base}/unregister", unregister, methods=["POST"], include_in_schema=False)
    app.add_api_route(
        f"{base}/region/{{name}}/unregister",
        unregister,
        methods=["POST"],
        include_in_schema=False,
    )
    app.add_api_route(
        f"{base}/region/{{name}}/register", register, methods=["POST"], include_in_schema=False
    )


def unknown_region(word: str, name: str) -> InvalidInput:
    """A shared-memory region asked for by name: none is ever registered here."""
    return InvalidInput(f"Unable to find {word} shared memory region: '{name}'")


def shared_memory_refusal(word: str) -> InvalidInput:
    """Why a shared-memory region cannot be registered (``word``: system or CUDA)."""
    return InvalidInput(
        f"{word} shared memory is not supported: lambdaserve runs where clients share no "
        "memory with it (Lambda, ECS); send tensors in the request (binary tensors are "
        "the compact form)"
    )


def log_settings() -> dict[str, Any]:
    level = logging.getLogger("lambdaserve").getEffectiveLevel()
    return {
        "log_file": "",
        "log_info": level <= logging.INFO,
        "log_warning": level <= logging.WARNING,
        "log_error": level <= logging.ERROR,
        "log_verbose_level": 1 if level <= logging.DEBUG else 0,
        "log_format": "default",
    }


def log_level(body: dict[str, Any]) -> int | None:
    """Triton's switches as one level: verbose -> DEBUG, info -> INFO, and so on down."""
    for key in ("log_verbose_level", "log_info", "log_warning", "log_error"):
        if key in body and not isinstance(body[key], bool | int):
            raise InvalidInput(f"{key} must be a boolean (log_verbose_level: an integer)")
    if body.get("log_verbose_level"):
        return logging.DEBUG
    for key, level in (("log_info", logging.INFO), ("log_warning", logging.WARNING)):
        if body.get(key) is True:
            return level
    if body.get("log_info") is False:
        return logging.WARNING if body.get("log_warning", True) else logging.ERROR
    return None
