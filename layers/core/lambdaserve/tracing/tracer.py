"""The tracer of a long-running server (``serve``, ``dev``): which requests are traced
(each model's setting's rate and count) and where their traces go (Triton mode: the trace
file, ``live_setting``/``trace_file``). The data plane starts a trace where a request
enters and finishes it where the answer leaves; the serving code stamps its compute in
between (``request_trace.computed``)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import numpy as np

from lambdaserve.tracing.config import TRITON, TraceConfig
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

    def start(self, model: str, request: Any) -> RequestTrace | None:
        """A trace for ``request`` (a decoded v2 request) when its model's setting samples
        it; None otherwise, at the cost of one lookup when tracing is off."""
        setting = self.scopes.setting(model)
        if not setting.traces or not setting.sample():
            return None
        trace = RequestTrace(model, getattr(request, "id", None), setting)
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
        if trace.setting.values.mode == TRITON:
            try:
                trace.setting.write(trace.records())
            except Exception:  # a trace never fails its request
                log.exception("trace %d of model %s could not be written", trace.id, trace.model)

    def update(self, model: str | None, update: SettingUpdate) -> None:
        self.scopes.update(model, update)

    def close(self) -> None:
        """Shutdown: the traces held are written and the trace files closed."""
        self.scopes.close()
