"""The management API's rollouts: ``POST /models/{m}/rollouts`` starts one on a label,
``GET /models/{m}/rollouts[/{label}]`` reads them, ``POST .../{label}/promote`` (the next
step; ``?full=true``: all of them) and ``POST .../{label}/abort`` are a person's moves. The
judge's own moves happen elsewhere (``rollouts.service.Rollouts.advance_all``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Query, Request

from lambdaserve.apps.json_body import json_object
from lambdaserve.protocol.names import check_model_name
from lambdaserve.rollouts.service import Rollouts


def install_rollout_routes(app: FastAPI, rollouts: Callable[[], Rollouts]) -> None:
    @app.post("/models/{model}/rollouts", status_code=201)
    async def start_rollout(model: str, request: Request) -> dict[str, Any]:
        body = await json_object(request)
        return await asyncio.to_thread(rollouts().start, check_model_name(model), body)

    @app.get("/models/{model}/rollouts")
    def list_rollouts(model: str) -> dict[str, Any]:
        return {"rollouts": rollouts().of_model(check_model_name(model))}

    @app.get("/models/{model}/rollouts/{label}")
    def rollout_status(model: str, label: str) -> dict[str, Any]:
        return rollouts().status(check_model_name(model), label)

    @app.post("/models/{model}/rollouts/{label}/promote")
    def promote_rollout(model: str, label: str, full: bool = Query(False)) -> dict[str, Any]:
        return rollouts().promote(check_model_name(model), label, full=full)

    @app.post("/models/{model}/rollouts/{label}/abort")
    def abort_rollout(model: str, label: str) -> dict[str, Any]:
        return rollouts().abort(check_model_name(model), label)


def rollouts_of(rollouts: list[dict[str, Any]], version: int) -> list[dict[str, Any]]:
    """For describe: the current or last rollout of every label that moves ``version`` (as
    stable or as the new version): phase, weight, message and why it rolled back."""
    return [
        {
            "label": r["spec"]["label"],
            "stable": r["spec"]["stable"],
            "to": r["spec"]["to"],
            "phase": r["phase"],
            "weight": r["weight"],
            "message": r["message"],
            "rolledBack": r["rolled_back"],
        }
        for r in rollouts
        if version in (r["spec"]["stable"], r["spec"]["to"])
    ]
