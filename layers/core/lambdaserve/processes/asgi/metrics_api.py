"""TorchServe's metrics API: ``GET /metrics`` on a port of its own (8082 in ``lambdaserve
dev``), with ``?name[]=`` to pick families; and the response counts it reports, taken from
the inference and management apps it is told to watch."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lambdaserve.metrics.stats import StatsRegistry
from lambdaserve.metrics.torchserve import render, torchserve_registry

TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"


class ResponseCounts:
    """Responses answered by the apps ``watch`` wrapped, by class (2XX, 4XX, 5XX)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def watch(self, app: ASGIApp) -> ASGIApp:
        async def counted(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return

            async def counting_send(message: Message) -> None:
                if message["type"] == "http.response.start":
                    with self._lock:
                        self._counts[f"{int(message['status']) // 100}XX"] += 1
                await send(message)

            await app(scope, receive, counting_send)

        return counted

    def __call__(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


def metrics_api_app(
    stats: Callable[[], StatsRegistry], responses: ResponseCounts, disk_path: str = "/"
) -> Starlette:
    registry = torchserve_registry(stats, responses, disk_path)

    async def metrics(request: Request) -> Response:
        names = request.query_params.getlist("name[]")
        return PlainTextResponse(render(registry, names), media_type=TEXT_FORMAT)

    return Starlette(routes=[Route("/metrics", metrics, methods=["GET"])])
