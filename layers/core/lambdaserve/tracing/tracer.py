"""The tracer of a long-running server (``serve``, ``dev``): which requests are traced
(each model's setting's rate and count) and where their traces go (Triton mode: the trace
file, ``live_setting``/``trace_file``; OpenTelemetry mode: spans over OTLP/HTTP,
``otel``). The data plane starts a trace where a request
enters and finishes it where the answer leaves; the serving code stamps its compute in
between (``request_trace.computed``)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import numpy as np

from lambdaserve.tracing.config import OPENTELEMETRY, TRITON, TraceConfig
from lambdaserve.tracing.frontend import FRONTEND, Frontend
from lambdaserve.tracing.otel import CALLER, OtlpExporter, parse_traceparent
from lambdaserve.tracing.request_trace import (
    REQUEST_END,
    REQUEST_START,
    RequestTrace,
    follow,
    forget,
)
from lambdaserve.tracing.scopes import SettingUpdate, TraceScopes

log = logging.getLogger(__name__)


class Tracer:
    def __init__(self, config: TraceConfig) -> None:
        self.config = config
        self.scopes = TraceScopes(config)
        self.exporter = None
        if config.mode == OPENTELEMETRY:
            self.exporter = OtlpExporter(config.otel_url, config.otel_resources)

    def start(self, model: str, request: Any) -> RequestTrace | None:
        """A trace for ``request`` (a decoded v2 request) when its model's setting samples
        it; None otherwise, at the cost of one lookup when tracing is off."""
        setting = self.scopes.setting(model)
        if not setting.traces:
            return None
        # OpenTelemetry: a request that carries its caller's trace is traced, as in Triton
        caller = parse_traceparent(CALLER.get()) if self.exporter is not None else None
        if not setting.sample() and caller is None:
            return None
        trace = RequestTrace(model, getattr(request, "id", None), setting)
        trace.caller = caller
        frontend = FRONTEND.get()
        if frontend is not None and frontend.trace is None:  # the door's receive stamps first
            frontend.stamp_receive(trace)
            trace.door = True
        trace.stamp(REQUEST_START)
        follow(request, trace)
        return trace

    def queued(self, trace: RequestTrace, request: Any) -> None:
        inputs: Iterable[tuple[str, np.ndarray[Any, Any]]] = (
            (tensor.name, tensor.data) for tensor in getattr(request, "inputs", ())
        )
        trace.queued(list(inputs) if trace.tensors else [])

    def finish(self, trace: RequestTrace, request: Any, version: int | None) -> None:
        """The answer leaves (or the request failed): REQUEST_END, and the trace written."""
        trace.stamp(REQUEST_END)
        forget(request)
        if version is not None:
            trace.version = version
        if not trace.door:
            self._write(trace)

    def opened(self, kind: str) -> Frontend | None:
        """A door's frontend stamps for a request (``kind``: HTTP or GRPC), when any setting
        may trace it; None otherwise (one attribute read)."""
        return Frontend(kind) if self.scopes.may_trace else None

    def sent(self, frontend: Frontend, send_start: int) -> None:
        """The door has sent the answer: its trace, if it was traced, is written."""
        trace = frontend.sent(send_start)
        if trace is not None:
            self._write(trace)

    def _write(self, trace: RequestTrace) -> None:
        try:
            if self.exporter is not None:
                self.exporter.export(trace, trace.caller)
            elif trace.setting.values.mode == TRITON:
                trace.setting.write(trace.records())
        except Exception:  # a trace never fails its request
            log.exception("trace %d of model %s could not be written", trace.id, trace.model)

    def update(self, model: str | None, update: SettingUpdate) -> None:
        self.scopes.update(model, update)

    def flush(self) -> None:
        """What the trace files were handed is written (they write on a thread of their own)."""
        self.scopes.flush()

    def close(self) -> None:
        """Shutdown: the traces held are written (or exported) and the trace files closed."""
        self.scopes.close()
        if self.exporter is not None:
            self.exporter.close()
