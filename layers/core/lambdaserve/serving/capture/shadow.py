"""Shadow traffic: a sampled copy of a weighted label's requests run on its shadow version
after the answer is sent, the shadow's request, answer (or error) and latency recorded as
payload capture records an exchange (``captures/<model>/<shadow version>/``), marked
``"shadow": true``, never returned.

Never in the primary's way: a copy is queued without waiting (bounded by ``max_pending``;
a full queue drops it, counted) and handled by threads of its own; whatever the shadow does,
raise included, stays here. A long-running process runs the copy itself (``ShadowRunner``);
a Lambda function, frozen once it has answered, sends it to the requests queue
(``queued.shadows``), whose batcher runs and records it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import orjson

from lambdaserve.protocol.v2 import InferRequest, encode_infer_response
from lambdaserve.serving.capture.data_capture import CaptureSetting, DataCapture, Exchange
from lambdaserve.tensors import encoding

if TYPE_CHECKING:
    from lambdaserve.serving.model_server import ModelServer

JSON = "application/json"
# a shadow's record keeps both sides whatever the version's data_capture says: it is the
# shadow's only output
_RECORDED = CaptureSetting(sampling_percentage=100.0)

logger = logging.getLogger(__name__)

# (model, version, request) -> outputs: the shadow version's run, in the shadow's thread
Run = Callable[[str, int, InferRequest], Mapping[str, np.ndarray[Any, Any]]]


class ShadowSink(Protocol):
    """Where the data plane sends a shadow copy, after the answer: never waits, never raises."""

    def offer(self, model: str, version: int, request: InferRequest, primary: int) -> None: ...


# (model, shadow version, request, primary version): one copy's work, in a shadow thread
Handle = Callable[[str, int, InferRequest, int], None]


@dataclass
class ShadowCounts:
    sent: int = 0  # handled: run and recorded, or sent on to be run
    dropped: int = 0  # the queue was full: never handled
    failed: int = 0  # its handling raised (logged)


class ShadowQueue:
    """A bounded queue of shadow copies and the threads that ``handle`` them."""

    def __init__(self, handle: Handle, *, max_pending: int = 64, threads: int = 2) -> None:
        self._handle = handle
        self._queue: queue.Queue[tuple[str, int, InferRequest, int]] = queue.Queue(max_pending)
        self._threads = threads
        self._started = False
        self._lock = threading.Lock()
        self.counts = ShadowCounts()

    def offer(self, model: str, version: int, request: InferRequest, primary: int) -> None:
        """Queue a copy of ``request`` for shadow ``version`` (``primary``: the version that
        answered it); never waits, never raises."""
        try:
            self._queue.put_nowait((model, version, request, primary))
        except queue.Full:
            with self._lock:
                self.counts.dropped += 1
            return
        self._start()

    def _start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        for n in range(self._threads):
            threading.Thread(target=self._work, name=f"shadow-{n}", daemon=True).start()

    def _work(self) -> None:
        while True:
            model, version, request, primary = self._queue.get()
            try:
                self._handle(model, version, request, primary)
            except Exception:  # a bug or an outage here must not stop the thread
                logger.exception("shadow of %s version %s not handled", model, version)
                with self._lock:
                    self.counts.failed += 1
                continue
            with self._lock:
                self.counts.sent += 1


class ShadowRunner(ShadowQueue):
    """A long-running process's shadows: each copy run here (``run``) and recorded."""

    def __init__(
        self, run: Run, capture: DataCapture, *, max_pending: int = 64, threads: int = 2
    ) -> None:
        super().__init__(self._shadow, max_pending=max_pending, threads=threads)
        self._run = run
        self._capture = capture

    def _shadow(self, model: str, version: int, request: InferRequest, primary: int) -> None:
        began = time.perf_counter()
        try:
            outputs = self._run(model, version, request)
            answer = encode_infer_response(model, version, request, outputs).body
        except Exception as exc:  # the shadow's failure is what it recorded
            answer = shadow_error(str(exc))
        latency_ms = (time.perf_counter() - began) * 1000
        body = request_body(request)
        record_shadow(
            self._capture,
            model,
            version,
            request=body,
            answer=answer,
            primary=primary,
            latency_ms=latency_ms,
        )


def shadow_error(message: str) -> bytes:
    """A shadow's failure as its record's answer."""
    return orjson.dumps({"error": message})


def record_shadow(
    capture: DataCapture,
    model: str,
    version: int,
    *,
    request: bytes,
    answer: bytes,
    primary: int,
    latency_ms: float,
) -> None:
    """One shadow exchange into payload capture (v2 JSON both ways), marked a shadow's."""
    metadata = {"shadow": True, "primaryVersion": primary, "latencyMs": round(latency_ms, 3)}
    exchange = Exchange(model, version, request, JSON, answer, JSON, metadata=metadata)
    capture.queue(_RECORDED, exchange)


def request_body(request: InferRequest) -> bytes:
    """The request as v2 JSON (the shadow's record of what it was asked)."""
    return orjson.dumps(request_document(request), option=orjson.OPT_SERIALIZE_NUMPY)


def request_document(request: InferRequest) -> dict[str, Any]:
    """The request as a v2 JSON document (tensors' data may be numpy arrays)."""
    document: dict[str, Any] = {
        "inputs": [
            {
                "name": tensor.name,
                "datatype": tensor.datatype,
                "shape": list(tensor.shape),
                "data": encoding.to_json(tensor.data),
            }
            for tensor in request.inputs
        ]
    }
    if request.id is not None:
        document["id"] = request.id
    if request.parameters:
        document["parameters"] = request.parameters
    return document


def shadow_runner(server: Callable[[], ModelServer], capture: DataCapture) -> ShadowRunner:
    """A long-running process's shadow traffic: each copy run on the model server (looked up
    per copy) in the runner's threads, recorded through the process's payload capture."""

    def run(model: str, version: int, request: InferRequest) -> Mapping[str, Any]:
        return server().infer(model, version, request, lambda _served, outputs: outputs)

    return ShadowRunner(run, capture)
