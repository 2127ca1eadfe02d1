"""Triton's shared-memory, logging and trace extensions. System shared memory is served where
the process has it (``serve``, ``dev``: regions registered, read and written); elsewhere, and
CUDA shared memory everywhere, answered as a server without it would: status lists nothing,
unregister succeeds, register is a 400 that says why. Log settings map onto lambdaserve's log
level. Stock clients call these; a 404 would stop them."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import asdict
from typing import Any

from fastapi import FastAPI, Request

from lambdaserve.apps.json_body import json_object
from lambdaserve.errors import InvalidInput
from lambdaserve.tensors.shared_memory import SystemSharedMemory

_KINDS = {"systemsharedmemory": "system", "cudasharedmemory": "CUDA"}
TRACE_OFF = {
    "trace_level": ["OFF"],
    "trace_rate": "1000",
    "trace_count": "-1",
    "log_frequency": "0",
    "trace_file": "",
    "trace_mode": "triton",
}


def install_triton_extras(app: FastAPI, shared: SystemSharedMemory | None = None) -> None:
    """``shared``: the process's system shared memory (serve, dev); None where clients
    share no memory with the server (Lambda)."""
    _install_shared_memory(app, "cudasharedmemory", "CUDA")
    if shared is None:
        _install_shared_memory(app, "systemsharedmemory", "system")
    else:
        _install_system_shared_memory(app, shared)

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

    @app.get("/v2/trace/setting", include_in_schema=False)
    @app.get("/v2/models/{model}/trace/setting", include_in_schema=False)
    async def trace_settings(model: str | None = None) -> dict[str, Any]:
        return TRACE_OFF

    @app.post("/v2/trace/setting", include_in_schema=False)
    @app.post("/v2/models/{model}/trace/setting", include_in_schema=False)
    async def update_trace_settings(request: Request, model: str | None = None) -> dict[str, Any]:
        body = await json_object(request)
        levels = body.get("trace_level")
        if levels not in (None, ["OFF"], []):
            raise InvalidInput(
                "tracing is not available in lambdaserve; per-model timings are in "
                "/v2/models/{m}/stats and the access log (--access-log)"
            )
        return TRACE_OFF


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


def _install_system_shared_memory(app: FastAPI, shared: SystemSharedMemory) -> None:
    async def status(name: str | None = None) -> list[dict[str, Any]]:
        return [asdict(region) for region in shared.status(name or "")]

    async def unregister(name: str | None = None) -> dict[str, Any]:
        shared.unregister(name or "")
        return {}

    async def register(name: str, request: Request) -> dict[str, Any]:
        body = await json_object(request)
        key, offset, size = body.get("key"), body.get("offset", 0), body.get("byte_size")
        if not isinstance(key, str) or not isinstance(size, int) or not isinstance(offset, int):
            raise InvalidInput(
                'registering a region takes {"key": <shm key>, "offset": <bytes>, '
                '"byte_size": <bytes>}'
            )
        await asyncio.to_thread(shared.register, name, key, offset, size)
        return {}

    base = "/v2/systemsharedmemory"
    app.add_api_route(f"{base}/status", status, methods=["GET"], include_in_schema=False)
    app.add_api_route(
        f"{base}/region/{{name}}/status", status, methods=["GET"], include_in_schema=False
    )
    app.add_api_route(f"{base}/unregister", unregister, methods=["POST"], include_in_schema=False)
    app.add_api_route(
        f"{base}/region/{{name}}/unregister", unregister, methods=["POST"], include_in_schema=False
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
