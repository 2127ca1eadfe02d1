"""``GET /metrics`` of a replica in ``serve --workers N``: the sums over every replica.

The inference app's own ``/metrics`` answers for its process alone; a scrape reaches one
replica of N (the kernel picks), so in front of it this answers with ``metrics.shared``'s
sums, and this replica's samples are written for the others every second.
"""

from __future__ import annotations

import os

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry
from starlette.types import ASGIApp, Receive, Scope, Send

from lambdaserve.metrics.prometheus import exposition
from lambdaserve.metrics.shared import SummedMetrics, publish_every
from lambdaserve.processes.siblings import Siblings, write_atomically

PUBLISH_INTERVAL_S = 1.0


class SharedMetrics:
    def __init__(self, app: ASGIApp, own: CollectorRegistry, group: Siblings) -> None:
        self._app = app
        self._registry = CollectorRegistry()
        self._registry.register(SummedMetrics(own, group.metrics_files))
        mine = group.metrics_file(os.getpid())
        publish_every(PUBLISH_INTERVAL_S, own, lambda data: write_atomically(mine, data))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/metrics" or scope["method"] != "GET":
            await self._app(scope, receive, send)
            return
        body = exposition(self._registry)  # Triton's counters typed as Triton writes them
        headers = [
            (b"content-type", CONTENT_TYPE_LATEST.encode()),
            (b"content-length", str(len(body)).encode()),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
