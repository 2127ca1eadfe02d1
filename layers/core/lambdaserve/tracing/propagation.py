"""One trace across the serverless path: the trace context a request carries from hop to hop
(API Gateway -> infer -> SQS -> batcher -> infer, and infer -> ``serve`` when forwarding), in
the two spellings the path meets: W3C ``traceparent`` (``00-<trace>-<span>-<flags>``: HTTP
callers, OpenTelemetry, the forwarded request, the ``traceparent`` message attribute) and
X-Ray's trace header (``Root=1-<8 hex>-<24 hex>;Parent=<span>;Sampled=1``: API Gateway's
``X-Amzn-Trace-Id``, Lambda's ``_X_AMZN_TRACE_ID``, SQS's ``AWSTraceHeader``). Both hold the
same 128-bit trace id and 64-bit parent id, so one converts to the other without loss.

``CURRENT`` is the context of the hop being run (set by the entry point); what it sends on
carries it. Spans of hops that belong to several traces at once (the batcher's run, the batch
invoke) are recorded per request through ``record``, into the process's sink (X-Ray when the
function traces; nothing otherwise, at the cost of one check)."""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
_XRAY_ROOT = re.compile(r"^1-([0-9a-f]{8})-([0-9a-f]{24})$")
_SPAN = re.compile(r"^[0-9a-f]{16}$")


@dataclass(frozen=True)
class TraceContext:
    """A trace id (32 hex) and the span that is the parent of what comes next (16 hex)."""

    trace_id: str
    span_id: str
    sampled: bool = True

    @property
    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{'01' if self.sampled else '00'}"

    @property
    def xray_root(self) -> str:
        return f"1-{self.trace_id[:8]}-{self.trace_id[8:]}"

    @property
    def xray_header(self) -> str:
        return f"Root={self.xray_root};Parent={self.span_id};Sampled={int(self.sampled)}"

    def child(self) -> TraceContext:
        """The context of a new span under this one (its own id)."""
        return TraceContext(self.trace_id, new_span_id(), self.sampled)


def new_span_id() -> str:
    return secrets.token_hex(8)


def from_traceparent(header: str | None) -> TraceContext | None:
    """A valid W3C traceparent's context; None for anything else (ignored, as W3C says)."""
    match = _TRACEPARENT.match((header or "").strip().lower())
    if match is None or set(match.group(1)) == {"0"} or set(match.group(2)) == {"0"}:
        return None
    return TraceContext(match.group(1), match.group(2), int(match.group(3), 16) & 1 == 1)


def from_xray(header: str | None) -> TraceContext | None:
    """X-Ray's trace header: a context when it names a root and a parent. API Gateway's own
    header may carry a root alone (the request's first hop): the root becomes the trace and
    a new span id its parent. ``Sampled`` absent or ``?`` counts as sampled: the hop decides."""
    fields = dict(part.strip().split("=", 1) for part in (header or "").split(";") if "=" in part)
    root = _XRAY_ROOT.match(fields.get("Root", "").lower())
    if root is None:
        return None
    parent = fields.get("Parent", "").lower()
    span = parent if _SPAN.match(parent) else new_span_id()
    return TraceContext(root.group(1) + root.group(2), span, fields.get("Sampled") != "0")


def from_headers(headers: Mapping[str, str]) -> TraceContext | None:
    """An incoming request's context (lower-case header names): its ``traceparent`` (the
    caller's own trace), else API Gateway's ``X-Amzn-Trace-Id``."""
    return from_traceparent(headers.get("traceparent")) or from_xray(headers.get("x-amzn-trace-id"))


CURRENT: ContextVar[TraceContext | None] = ContextVar("lambdaserve_trace_context", default=None)


class SpanSink(Protocol):
    def record(
        self,
        name: str,
        span: TraceContext,
        parent_id: str,
        times: tuple[float, float],
        annotations: Mapping[str, str | int],
    ) -> None:
        """Span ``span.span_id`` of trace ``span.trace_id``, under ``parent_id``, from
        ``times[0]`` to ``times[1]`` (seconds since the epoch)."""


_sinks: list[SpanSink] = []


def set_sink(sink: SpanSink | None) -> None:
    """Where ``record`` sends spans in this process (None: nowhere)."""
    _sinks[:] = [] if sink is None else [sink]


def recording() -> bool:
    return bool(_sinks)


def record(
    name: str,
    span: TraceContext,
    parent_id: str,
    times: tuple[float, float],
    annotations: Mapping[str, str | int] | None = None,
) -> None:
    """A finished span, to the process's sink; sampled-out spans are not sent."""
    if _sinks and span.sampled:
        _sinks[0].record(name, span, parent_id, times, annotations or {})
