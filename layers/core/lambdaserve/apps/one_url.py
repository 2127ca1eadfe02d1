"""Triton's clients use one URL: the model-repository extension (``/v2/repository/...``)
served on the inference port by the management app, as the deployed HTTP API routes those
paths to the management function.

A ``load`` or ``unload`` that succeeds drops the inference side's cached catalog view of the
model, so readiness on the same server follows at once rather than after the catalog TTL; an
``unload`` also drops the versions this server has loaded (a Python model's ``finalize`` runs).
"""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lambdaserve.serving.data_plane import InferenceDataPlane

REPOSITORY = "/v2/repository"
_LOAD_OR_UNLOAD = re.compile(r"^/v2/repository/models/([^/]+)/(load|unload)$")


class RepositoryOnInferenceUrl:
    def __init__(self, inference: ASGIApp, management: ASGIApp, plane: InferenceDataPlane) -> None:
        self._inference = inference
        self._management = management
        self._plane = plane

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not path.startswith(REPOSITORY):
            await self._inference(scope, receive, send)
            return
        changed = _LOAD_OR_UNLOAD.match(path)
        if changed is None:
            await self._management(scope, receive, send)
            return

        async def send_then_forget(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 200:
                # before the client can ask again
                self._plane.forget(changed.group(1))
                if changed.group(2) == "unload":  # as Triton's: finalize runs, memory freed
                    self._plane.server().residency.unload(changed.group(1))
            await send(message)

        await self._management(scope, receive, send_then_forget)
