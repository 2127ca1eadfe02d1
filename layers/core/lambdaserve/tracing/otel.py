"""OpenTelemetry mode (``--trace-config mode=opentelemetry``): a traced request becomes spans,
as Triton's OpenTelemetry tracer makes them: ``InferRequest`` (the root, a child of the
caller's span when the request carried a W3C ``traceparent``), the model's span under it
with Triton's request timestamps as events, and ``compute`` under that with the compute
timestamps; a model a traced model calls hangs under its caller's compute span.

Spans leave through the OpenTelemetry SDK over OTLP/HTTP: its BatchSpanProcessor sends them
from a background thread (a bounded queue of 2048, every 5 s or 512 spans, and at shutdown)
with the OTLP/HTTP protobuf exporter. The SDK is imported in this mode only: tracing off or in
Triton mode costs nothing of it."""

from __future__ import annotations

import logging
import queue
import random
import re
import threading
import time
from contextvars import ContextVar
from typing import Any

from lambdaserve.errors import InvalidInput
from lambdaserve.tracing.request_trace import COMPUTE, RequestTrace

log = logging.getLogger(__name__)
_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")
_QUEUE, _BATCH, _DELAY_S = 2048, 512, 5  # Triton's bsp_* defaults
# the W3C traceparent of the request being answered, set by the door it came in by
CALLER: ContextVar[str | None] = ContextVar("lambdaserve_traceparent", default=None)


def parse_traceparent(header: str | None) -> tuple[str, str] | None:
    """(trace id, parent span id) of a valid W3C traceparent; None otherwise."""
    match = _TRACEPARENT.match((header or "").strip().lower())
    if match is None or set(match.group(1)) == {"0"} or set(match.group(2)) == {"0"}:
        return None
    return match.group(1), match.group(2)


class OtlpExporter:
    """Spans through the OpenTelemetry SDK: its ``BatchSpanProcessor`` (Triton's bsp
    defaults) and OTLP/HTTP (protobuf) span exporter. Triton's spans are finished when they
    are made (their times are the trace's stamps), so each is made as the SDK's finished
    span (``ReadableSpan``) and handed to the processor: a tracer's start/end machinery
    (contexts, sampler) costs ~4x as much for nothing (scripts/bench_trace.py). This
    process's own provider: a model's own OpenTelemetry use keeps the global one."""

    def __init__(self, url: str, resources: tuple[tuple[str, str], ...]) -> None:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.sdk.util.instrumentation import InstrumentationScope
        except ImportError as exc:
            raise InvalidInput(
                "--trace-config mode=opentelemetry needs the OpenTelemetry SDK: "
                "pip install 'lambdaserve[server]' (opentelemetry-sdk, "
                f"opentelemetry-exporter-otlp-proto-http); {exc}"
            ) from None
        self.url = url
        attributes = {"service.name": "triton-inference-server", **dict(resources)}
        self._resource = Resource.create(attributes)
        self._scope = InstrumentationScope("lambdaserve")
        self._processor: Any = BatchSpanProcessor(
            OTLPSpanExporter(endpoint=url),
            max_queue_size=_QUEUE,
            max_export_batch_size=_BATCH,
            schedule_delay_millis=_DELAY_S * 1000,
        )
        self._offset = time.time_ns() - time.perf_counter_ns()  # monotonic -> wall clock
        # spans are made on a thread of their own, off the request's path (a bounded queue;
        # what it drops is counted in the log)
        self._traces: queue.Queue[tuple[RequestTrace, tuple[str, str] | None] | None]
        self._traces = queue.Queue(_QUEUE)
        self.dropped = 0
        self._thread = threading.Thread(target=self._make_spans, name="otel-spans", daemon=True)
        self._thread.start()

    def export(self, trace: RequestTrace, context: tuple[str, str] | None) -> None:
        """The spans of ``trace`` (and of its children) to be made and sent, under the
        caller's span if any."""
        try:
            self._traces.put_nowait((trace, context))
        except queue.Full:
            self.dropped += 1
            if self.dropped in (1, 1000, 100000):
                log.warning("%d traces dropped: the OTLP exporter is behind", self.dropped)

    def close(self) -> None:
        """Shutdown: what is queued is made and sent, then the threads end."""
        self._traces.put(None)
        self._thread.join(timeout=10)
        self._processor.shutdown()

    def _make_spans(self) -> None:
        while (item := self._traces.get()) is not None:
            trace, context = item
            try:
                if context is None:  # a root: a new trace
                    self._spans(trace, random.getrandbits(128), None, root=True)
                else:
                    self._spans(trace, int(context[0], 16), int(context[1], 16), root=True)
            except Exception:  # a trace never stops the others
                log.exception("the spans of trace %d could not be made", trace.id)

    def _spans(self, trace: RequestTrace, trace_id: int, parent: int | None, root: bool) -> None:
        stamps = [e for e in trace.events if isinstance(e, tuple)]
        if not stamps:
            return
        door = [(n, ns) for n, ns in stamps if n.startswith(("HTTP_", "GRPC_"))]
        compute = [(n, ns) for n, ns in stamps if n in COMPUTE]
        outer = [(n, ns) for n, ns in stamps if n not in COMPUTE and (n, ns) not in door]
        if root:  # the door's stamps are the root's events, as Triton's frontends add them
            parent = self._span("InferRequest", (trace_id, parent), stamps, door, {})
        attributes: dict[str, Any] = {
            "triton.model_name": trace.model,
            "triton.model_version": trace.version,
            "triton.trace_id": trace.id,
            "triton.trace_parent_id": trace.parent_id,
            "triton.request_id": trace.request_id,
        }
        model = self._span(trace.model, (trace_id, parent), outer or stamps, outer, attributes)
        if compute:
            span = self._span("compute", (trace_id, model), compute, compute, {})
            for child in trace.children:
                self._spans(child, trace_id, span, root=False)

    def _span(
        self,
        name: str,
        ids: tuple[int, int | None],
        bounds: list[tuple[str, int]],
        events: list[tuple[str, int]],
        attributes: dict[str, Any],
    ) -> int:
        """A finished span of trace ``ids[0]`` under span ``ids[1]``, from the first to the
        last of ``bounds``, ``events`` on it, to the processor; its id."""
        from opentelemetry.sdk.trace import Event, ReadableSpan
        from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

        trace_id, parent = ids
        flags = TraceFlags(TraceFlags.SAMPLED)
        span_id = random.getrandbits(64)  # as the SDK's RandomIdGenerator makes them
        span = ReadableSpan(
            name,
            context=SpanContext(trace_id, span_id, is_remote=False, trace_flags=flags),
            parent=None
            if parent is None
            else SpanContext(trace_id, parent, is_remote=False, trace_flags=flags),
            resource=self._resource,
            attributes={k: v for k, v in attributes.items() if v is not None and v != ""},
            events=[Event(event, timestamp=ns + self._offset) for event, ns in events],
            kind=SpanKind.SERVER,  # as Triton's spans are
            start_time=bounds[0][1] + self._offset,
            end_time=bounds[-1][1] + self._offset,
            instrumentation_scope=self._scope,
        )
        self._processor.on_end(span)
        return span_id
