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
    """Spans through the OpenTelemetry SDK: a ``TracerProvider`` of its own (not the global
    one: a model's own OpenTelemetry use keeps its provider), its ``BatchSpanProcessor``
    with Triton's bsp defaults, and the OTLP/HTTP (protobuf) span exporter."""

    def __init__(self, url: str, resources: tuple[tuple[str, str], ...]) -> None:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.sdk.trace.sampling import ALWAYS_ON
        except ImportError as exc:
            raise InvalidInput(
                "--trace-config mode=opentelemetry needs the OpenTelemetry SDK: "
                "pip install 'lambdaserve[local]' (opentelemetry-sdk, "
                f"opentelemetry-exporter-otlp-proto-http); {exc}"
            ) from None
        self.url = url
        attributes = {"service.name": "triton-inference-server", **dict(resources)}
        # ALWAYS_ON: Triton's rate and count chose this request; the SDK samples no further
        self._provider = TracerProvider(resource=Resource.create(attributes), sampler=ALWAYS_ON)
        self._provider.add_span_processor(
            BatchSpanProcessor(
                OTLPSpanExporter(endpoint=url),
                max_queue_size=_QUEUE,
                max_export_batch_size=_BATCH,
                schedule_delay_millis=_DELAY_S * 1000,
            )
        )
        self._tracer = self._provider.get_tracer("lambdaserve")
        self._offset = time.time_ns() - time.perf_counter_ns()  # monotonic -> wall clock
        # The SDK's spans cost ~30 us each to make: made on a thread of their own, off the
        # request's path (a bounded queue; what it drops is counted in the log)
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

    def _make_spans(self) -> None:
        while (item := self._traces.get()) is not None:
            try:
                self._export(*item)
            except Exception:  # a trace never stops the others
                log.exception("the spans of trace %d could not be made", item[0].id)

    def _export(self, trace: RequestTrace, context: tuple[str, str] | None) -> None:
        from opentelemetry import trace as api
        from opentelemetry.context import Context

        parent = Context()  # a root: the SDK makes a new trace id
        if context is not None:
            caller = api.SpanContext(
                int(context[0], 16),
                int(context[1], 16),
                is_remote=True,
                trace_flags=api.TraceFlags(api.TraceFlags.SAMPLED),
            )
            parent = api.set_span_in_context(api.NonRecordingSpan(caller))
        self._spans(trace, parent, root=True)

    def close(self) -> None:
        """Shutdown: what is queued is made and sent, then the threads end."""
        self._traces.put(None)
        self._thread.join(timeout=10)
        self._provider.shutdown()

    def _spans(self, trace: RequestTrace, parent: Any, root: bool) -> None:
        from opentelemetry import trace as api

        stamps = [e for e in trace.events if isinstance(e, tuple)]
        if not stamps:
            return
        door = [(n, ns) for n, ns in stamps if n.startswith(("HTTP_", "GRPC_"))]
        compute = [(n, ns) for n, ns in stamps if n in COMPUTE]
        outer = [(n, ns) for n, ns in stamps if n not in COMPUTE and (n, ns) not in door]
        if root:  # the door's stamps are the root's events, as Triton's frontends add them
            request_span = self._span("InferRequest", parent, stamps, door, {})
            parent = api.set_span_in_context(request_span)
        attributes: dict[str, Any] = {
            "triton.model_name": trace.model,
            "triton.model_version": trace.version,
            "triton.trace_id": trace.id,
            "triton.trace_parent_id": trace.parent_id,
            "triton.request_id": trace.request_id,
        }
        model_span = self._span(trace.model, parent, outer or stamps, outer, attributes)
        if compute:
            span = self._span("compute", api.set_span_in_context(model_span), compute, compute, {})
            for child in trace.children:
                self._spans(child, api.set_span_in_context(span), root=False)

    def _span(
        self,
        name: str,
        parent: Any,
        bounds: list[tuple[str, int]],
        events: list[tuple[str, int]],
        attributes: dict[str, Any],
    ) -> Any:
        """A finished span from the first to the last of ``bounds``, ``events`` on it."""
        from opentelemetry.trace import SpanKind

        kept = {k: v for k, v in attributes.items() if v is not None and v != ""}
        span = self._tracer.start_span(
            name,
            context=parent,
            kind=SpanKind.SERVER,  # as Triton's spans are
            attributes=kept,
            start_time=bounds[0][1] + self._offset,
        )
        for event, ns in events:
            span.add_event(event, timestamp=ns + self._offset)
        span.end(end_time=bounds[-1][1] + self._offset)
        return span
