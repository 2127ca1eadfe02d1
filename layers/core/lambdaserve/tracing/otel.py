"""OpenTelemetry mode (``--trace-config mode=opentelemetry``): a traced request becomes spans,
as Triton's OpenTelemetry tracer makes them: ``InferRequest`` (the root, a child of the
caller's span when the request carried a W3C ``traceparent``), the model's span under it
with Triton's request timestamps as events, and ``compute`` under that with the compute
timestamps; a model a traced model calls hangs under its caller's compute span.

Spans leave in batches over OTLP/HTTP (its JSON encoding, which collectors take beside
protobuf) from a background thread, as the SDK's BatchSpanProcessor sends them: a bounded
queue (what it drops is counted in the log), every 5 s or 512 spans, and at shutdown. The
OpenTelemetry SDK is not in the image, so this module speaks the protocol itself."""

from __future__ import annotations

import json
import logging
import queue
import re
import secrets
import threading
import time
import urllib.request
from contextvars import ContextVar
from typing import Any

from lambdaserve.tracing.request_trace import COMPUTE, RequestTrace

log = logging.getLogger(__name__)
_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")
_QUEUE, _BATCH, _DELAY_S = 2048, 512, 5.0  # Triton's bsp_* defaults
# the W3C traceparent of the request being answered, set by the door it came in by
CALLER: ContextVar[str | None] = ContextVar("lambdaserve_traceparent", default=None)


def parse_traceparent(header: str | None) -> tuple[str, str] | None:
    """(trace id, parent span id) of a valid W3C traceparent; None otherwise."""
    match = _TRACEPARENT.match((header or "").strip().lower())
    if match is None or set(match.group(1)) == {"0"} or set(match.group(2)) == {"0"}:
        return None
    return match.group(1), match.group(2)


class OtlpExporter:
    def __init__(self, url: str, resources: tuple[tuple[str, str], ...]) -> None:
        self.url = url
        self._resource = {"attributes": [_attribute("service.name", "triton-inference-server")]}
        for key, value in resources:
            self._resource["attributes"].append(_attribute(key, value))
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(_QUEUE)
        self._offset = time.time_ns() - time.perf_counter_ns()  # monotonic -> wall clock
        self.dropped = 0
        self._thread = threading.Thread(target=self._send_loop, name="otlp-export", daemon=True)
        self._thread.start()

    def export(self, trace: RequestTrace, context: tuple[str, str] | None) -> None:
        """The spans of ``trace`` (and of its children) onto the queue."""
        trace_id, parent = context or (secrets.token_hex(16), "")
        for span in self._spans(trace, trace_id, parent, root=True):
            try:
                self._queue.put_nowait(span)
            except queue.Full:
                self.dropped += 1
                if self.dropped in (1, 1000, 100000):
                    log.warning("%d trace spans dropped: the OTLP endpoint is behind", self.dropped)

    def close(self) -> None:
        """Shutdown: what is queued is sent, then the thread ends."""
        self._queue.put(None)
        self._thread.join(timeout=10)

    def _spans(
        self, trace: RequestTrace, trace_id: str, parent: str, root: bool
    ) -> list[dict[str, Any]]:
        stamps = [e for e in trace.events if isinstance(e, tuple)]
        if not stamps:
            return []
        spans = []
        door = [(n, ns) for n, ns in stamps if n.startswith(("HTTP_", "GRPC_"))]
        compute = [(n, ns) for n, ns in stamps if n in COMPUTE]
        outer = [(n, ns) for n, ns in stamps if n not in COMPUTE and (n, ns) not in door]
        if root:  # the door's stamps are the root's events, as Triton's frontends add them
            times = (stamps[0][1], stamps[-1][1])
            request_span = self._span(
                trace_id, parent, "InferRequest", times=times, events=door, attributes={}
            )
            spans.append(request_span)
            parent = request_span["spanId"]
        start, end = (outer or stamps)[0][1], (outer or stamps)[-1][1]
        attributes = {
            "triton.model_name": trace.model,
            "triton.model_version": trace.version,
            "triton.trace_id": trace.id,
            "triton.trace_parent_id": trace.parent_id,
        }
        if trace.request_id:
            attributes["triton.request_id"] = trace.request_id
        model_span = self._span(
            trace_id, parent, trace.model, times=(start, end), events=outer, attributes=attributes
        )
        spans.append(model_span)
        if compute:
            span = self._span(
                trace_id,
                model_span["spanId"],
                "compute",
                times=(compute[0][1], compute[-1][1]),
                events=compute,
                attributes={},
            )
            spans.append(span)
            for child in trace.children:
                spans += self._spans(child, trace_id, span["spanId"], root=False)
        return spans

    def _span(
        self,
        trace_id: str,
        parent: str,
        name: str,
        *,
        times: tuple[int, int],
        events: list[tuple[str, int]],
        attributes: dict[str, Any],
    ) -> dict[str, Any]:
        start, end = times
        span: dict[str, Any] = {
            "traceId": trace_id,
            "spanId": secrets.token_hex(8),
            "name": name,
            "kind": 2,  # SERVER, as Triton's spans are
            "startTimeUnixNano": str(start + self._offset),
            "endTimeUnixNano": str(end + self._offset),
            "events": [{"name": n, "timeUnixNano": str(ns + self._offset)} for n, ns in events],
            "attributes": [_attribute(k, v) for k, v in attributes.items()],
        }
        if parent:
            span["parentSpanId"] = parent
        return span

    def _send_loop(self) -> None:
        batch: list[dict[str, Any]] = []
        deadline = time.monotonic() + _DELAY_S
        while True:
            try:
                span = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                span = {}
            if span is None:
                self._send(batch)
                return
            if span:
                batch.append(span)
            if len(batch) >= _BATCH or time.monotonic() >= deadline:
                self._send(batch)
                batch, deadline = [], time.monotonic() + _DELAY_S

    def _send(self, spans: list[dict[str, Any]]) -> None:
        if not spans:
            return
        body = {
            "resourceSpans": [
                {
                    "resource": self._resource,
                    "scopeSpans": [{"scope": {"name": "lambdaserve"}, "spans": spans}],
                }
            ]
        }
        request = urllib.request.Request(
            self.url,
            json.dumps(body).encode(),
            {"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                answer.read()
        except OSError as exc:  # traces never fail serving; the log says where they went
            log.warning("%d trace spans not exported to %s: %s", len(spans), self.url, exc)


def _attribute(key: str, value: object) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": str(value)}}
