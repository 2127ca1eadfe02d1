"""One traced request: its id (and its parent's, for a model called by a traced model), model,
version, request id, and what happened to it, in Triton's activity names and nanoseconds of
one monotonic clock. Written as Triton's trace file holds it: the trace's identity object,
then one object per timestamp and, at the TENSORS level, one per tensor.

The serving code stamps a request's compute without holding its trace: the trace is followed
by the request it belongs to (``follow``/``forget``) and ``computed`` finds it, at the cost
of one check of an empty table when nothing is traced."""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import numpy as np

from lambdaserve.tracing.config import TENSORS, TIMESTAMPS
from lambdaserve.tracing.tensor_text import tensor_record

if TYPE_CHECKING:
    from lambdaserve.tracing.live_setting import LiveSetting

REQUEST_START, QUEUE_START, REQUEST_END = "REQUEST_START", "QUEUE_START", "REQUEST_END"
COMPUTE = ("COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END")
_IDS = itertools.count(1)  # Triton's trace ids: one sequence per server, from 1
_FOLLOWED: dict[int, RequestTrace] = {}  # id(request) -> its trace, while it runs
# the traced request whose model is running here: models it calls get child traces
_PARENT: ContextVar[RequestTrace | None] = ContextVar("lambdaserve_trace_parent", default=None)
_NOTHING = contextlib.nullcontext()


class RequestTrace:
    __slots__ = (
        "caller",
        "children",
        "door",
        "events",
        "id",
        "model",
        "parent_id",
        "request_id",
        "setting",
        "version",
    )

    def __init__(
        self, model: str, request_id: str | None, setting: LiveSetting, parent_id: int = 0
    ) -> None:
        self.id = next(_IDS)
        self.model = model
        self.version = -1  # known once a version answered
        self.request_id = request_id or ""
        self.parent_id = parent_id
        self.setting = setting
        self.events: list[tuple[str, int] | str] = []  # (name, ns), or a tensor's record
        self.children: list[RequestTrace] = []  # written with this trace, as Triton groups them
        self.caller: tuple[str, str] | None = None  # OpenTelemetry: the caller's trace, span
        self.door = False  # a door stamps its sending and writes the trace once it has sent

    @property
    def tensors(self) -> bool:
        return TENSORS in self.setting.values.levels

    def stamp(self, name: str, ns: int | None = None) -> None:
        self.events.append((name, time.perf_counter_ns() if ns is None else ns))

    def tensor(self, activity: str, name: str, array: np.ndarray[Any, Any]) -> None:
        self.events.append(tensor_record(self.id, activity, name, array))

    def queued(self, inputs: Sequence[tuple[str, np.ndarray[Any, Any]]]) -> None:
        """QUEUE_START, with the request's inputs at the TENSORS level."""
        self.stamp(QUEUE_START)
        if self.tensors:
            for name, array in inputs:
                self.tensor("TENSOR_QUEUE_INPUT", name, array)

    def records(self) -> str:
        """The trace as Triton writes it: comma-separated JSON objects. The identity and the
        timestamps at the TIMESTAMPS level, the tensors at TENSORS (alone, Triton writes
        only the tensors)."""
        if TIMESTAMPS not in self.setting.values.levels:
            parts = [e for e in self.events if isinstance(e, str)]
            parts.extend(child.records() for child in self.children)
            return ",".join(parts)
        head: dict[str, Any] = {"id": self.id, "model_name": self.model}
        head["model_version"] = self.version
        if self.request_id:
            head["request_id"] = self.request_id
        if self.parent_id:
            head["parent_id"] = self.parent_id
        parts = [json.dumps(head, separators=(",", ":"))]
        for event in self.events:
            if isinstance(event, str):
                parts.append(event)
                continue
            name, ns = event
            parts.append(f'{{"id":{self.id},"timestamps":[{{"name":"{name}","ns":{ns}}}]}}')
        parts.extend(child.records() for child in self.children)
        return ",".join(parts)


def follow(request: object, trace: RequestTrace) -> None:
    _FOLLOWED[id(request)] = trace


def forget(request: object) -> None:
    _FOLLOWED.pop(id(request), None)


def trace_of(request: object) -> RequestTrace | None:
    return _FOLLOWED.get(id(request)) if _FOLLOWED else None


def computed(
    members: Sequence[object],
    times: tuple[int, int, int, int],
    outputs: Sequence[Mapping[str, np.ndarray[Any, Any]]] | None = None,
) -> None:
    """The compute timestamps of one execution (start, inputs bound, model returned, outputs
    ready), for each traced member; at TENSORS, each member's outputs."""
    if not _FOLLOWED:
        return
    for index, member in enumerate(members):
        trace = _FOLLOWED.get(id(member))
        if trace is None:
            continue
        for name, ns in zip(COMPUTE, times, strict=True):
            trace.stamp(name, ns)
        if outputs is not None and trace.tensors:
            for name, array in outputs[index].items():
                trace.tensor("TENSOR_BACKEND_OUTPUT", name, array)


def following() -> bool:
    """Whether any request is traced now (none: every trace hook is a no-op)."""
    return bool(_FOLLOWED)


def parent_of(members: Sequence[object]) -> contextlib.AbstractContextManager[Any]:
    """Around a model's run: the models it calls (BLS, ensemble steps) are traced as children
    of its first traced member's trace, as Triton's spawned traces carry a parent id."""
    if not _FOLLOWED:
        return _NOTHING
    for member in members:
        trace = _FOLLOWED.get(id(member))
        if trace is not None:
            return _parent(trace)
    return _NOTHING


@contextlib.contextmanager
def _parent(trace: RequestTrace) -> Iterator[None]:
    token = _PARENT.set(trace)
    try:
        yield
    finally:
        _PARENT.reset(token)


def start_child(model: str, request: Any) -> RequestTrace | None:
    """A child trace for a model called by a traced model's run (None when the caller is
    not traced): REQUEST_START and QUEUE_START now, written with its parent."""
    parent = _PARENT.get()
    if parent is None:
        return None
    child = RequestTrace(model, getattr(request, "id", None), parent.setting, parent.id)
    child.stamp(REQUEST_START)
    inputs = [(t.name, t.data) for t in getattr(request, "inputs", ())] if child.tensors else []
    child.queued(inputs)
    follow(request, child)
    parent.children.append(child)
    return child


def end_child(child: RequestTrace, request: object, version: int | None) -> None:
    child.stamp(REQUEST_END)
    forget(request)
    if version is not None:
        child.version = version
