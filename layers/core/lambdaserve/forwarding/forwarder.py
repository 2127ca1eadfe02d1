"""Synchronous requests for GPU models through the HTTP API, from the same URL: the infer
function forwards a request for a model whose config asks for ``KIND_GPU`` to the server-mode
service (``lambdaserve serve`` behind its load balancer), which batches it on the GPU.

When the service has no capacity (scaled to zero: the load balancer answers 502/503/504
without a lambdaserve body, or the connection fails), a v2 infer request goes onto the
queue instead, as ``Prefer: respond-async`` would send it (the GPU queue wakes the service),
and the function waits for its result up to ``LAMBDASERVE_SERVER_WAIT_S``; not done by then,
the client gets 202 with the status URL. No request fails because capacity was at zero, and
none is answered twice: a request is either answered by the service, or queued once.
Other protocols' requests answer 503 with Retry-After while the service starts.

The forwarding client is urllib3, which botocore (so every environment that ships this
package) already installs and pyproject declares: httpx is only in the ``dev`` extra, and a
forwarder built on it failed every request in the infer image and in ``make dev``'s venv.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import orjson
import urllib3

from lambdaserve.protocol.v2 import HEADER_LENGTH
from lambdaserve.queued.results import ResultRecord
from lambdaserve.tracing.propagation import CURRENT

logger = logging.getLogger(__name__)

# The routes that run a model, and where their model name is
_MODEL_ROUTES = (
    re.compile(r"^/v2/models/(?P<model>[^/]+)(?:/versions/(?P<version>[^/]+))?/infer$"),
    re.compile(r"^/predictions/(?P<model>[^/]+)(?:/[^/]+)?$"),
    re.compile(r"^/explanations/(?P<model>[^/]+)(?:/[^/]+)?$"),
    re.compile(r"^/wfpredict/(?P<model>[^/]+)$"),
    re.compile(r"^/v1/models/(?P<model>[^/:]+)(?:/(?:versions|labels)/[^/:]+)?:predict$"),
    re.compile(r"^/(?P<model>[^/]+)/prediction$"),
)
_V2_INFER = _MODEL_ROUTES[0]
# Hop-by-hop headers, and those the client library sets again
_DROPPED = frozenset({"host", "content-length", "connection", "transfer-encoding", "keep-alive"})
_NO_CAPACITY = (502, 503, 504)
RETRY_AFTER_S = 30


@dataclass(frozen=True)
class HttpCall:
    method: str
    path: str
    query: str
    headers: Mapping[str, str]
    body: bytes


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Queue:
    """The queued path: submit a v2 request (its id), and read its result."""

    submit: Callable[[str, int | None, bytes, int | None], str]
    result: Callable[[str], ResultRecord]
    number: Callable[[str, str | None], int | None]


class ServerModeRouter:
    def __init__(
        self,
        server_url: str,
        wants_server: Callable[[str], bool],
        queue: Queue | None,
        *,
        wait_s: float = 25.0,
        client: urllib3.PoolManager | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._url = server_url.rstrip("/")
        self._wants = wants_server
        self._queue = queue
        self._wait_s = wait_s
        # no retries (a retried POST could run twice); redirects are answered as they are
        self._client = client or urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=2.0, read=wait_s), retries=False
        )
        self._clock = clock
        self._sleep = sleep

    def route(self, call: HttpCall) -> HttpAnswer | None:
        """The answer when server mode serves this request; None when it runs here."""
        model = _model_of(call.path)
        if model is None or call.method not in ("POST", "PUT"):
            return None
        try:
            if not self._wants(model):
                return None
        except Exception:
            return None  # unknown model: answered here, with the usual 404
        started = self._clock()
        forwarded = self._forward(call)
        if forwarded is not None:
            return forwarded
        return self._without_capacity(call, model, started)

    def _forward(self, call: HttpCall) -> HttpAnswer | None:
        url = self._url + call.path + (f"?{call.query}" if call.query else "")
        headers = {k: v for k, v in call.headers.items() if k.lower() not in _DROPPED}
        context = CURRENT.get()
        if context is not None:  # serve's spans join the request's trace (W3C traceparent)
            headers = {k: v for k, v in headers.items() if k.lower() != "traceparent"}
            headers["traceparent"] = context.traceparent
        try:
            response = self._client.request(
                call.method, url, body=call.body, headers=headers, redirect=False
            )
        except urllib3.exceptions.HTTPError as exc:
            logger.info("server mode unreachable (%s): the request goes to the queue", exc)
            return None
        kind = response.headers.get("content-type", "")
        if response.status in _NO_CAPACITY and not kind.startswith("application/json"):
            logger.info("server mode has no capacity (%d): queueing", response.status)
            return None
        kept = {
            k: v
            for k, v in response.headers.items()
            if k.lower() in ("content-type", HEADER_LENGTH.lower(), "location", "retry-after")
        }
        return HttpAnswer(response.status, response.data, kept)

    def _without_capacity(self, call: HttpCall, model: str, started: float) -> HttpAnswer:
        match = _V2_INFER.match(call.path)
        if match is None or self._queue is None:
            return _json(
                503,
                {
                    "error": f"the server-mode service for {model!r} is starting (it scales "
                    f"from zero); retry in {RETRY_AFTER_S} s, or send v2 infer requests, "
                    "which queue and wait for it"
                },
                {"retry-after": str(RETRY_AFTER_S)},
            )
        version = self._queue.number(model, unquote(match["version"] or "") or None)
        header = call.headers.get(HEADER_LENGTH.lower())
        request_id = self._queue.submit(
            model, version, call.body, int(header) if header is not None else None
        )
        deadline = started + self._wait_s
        delay = 0.1
        while self._clock() < deadline:
            record = self._queue.result(request_id)
            if record.status != "PENDING":
                return _finished(record)
            self._sleep(min(delay, max(0.0, deadline - self._clock())))
            delay = min(delay * 1.5, 1.0)
        status_url = f"/v2/requests/{request_id}"
        return _json(202, {"id": request_id, "status_url": status_url}, {"location": status_url})


def _model_of(path: str) -> str | None:
    for route in _MODEL_ROUTES:
        match = route.match(path)
        if match is not None:
            return unquote(match["model"])
    return None


def _finished(record: ResultRecord) -> HttpAnswer:
    if record.status == "SUCCESS" and record.body is not None:
        if record.header_length is not None:
            return HttpAnswer(
                200,
                record.body,
                {
                    "content-type": "application/octet-stream",
                    HEADER_LENGTH.lower(): str(record.header_length),
                },
            )
        return HttpAnswer(200, record.body, {"content-type": "application/json"})
    return _json(record.http_status, {"error": record.error, "id": record.id})


def _json(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> HttpAnswer:
    return HttpAnswer(
        status, orjson.dumps(body), {"content-type": "application/json", **(headers or {})}
    )
