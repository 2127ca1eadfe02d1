"""Shadow traffic: a sampled copy of a weighted label's requests run on its shadow version
after the answer is sent, the shadow's request, answer (or error) and latency recorded as
payload capture records an exchange (``captures/<model>/<shadow version>/``), marked
``"shadow": true``, never returned.

Never in the primary's way: a copy is queued without waiting (bounded by ``max_pending``;
a full queue drops it, counted) and run by threads of its own; whatever the shadow does,
raise included, stays here.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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


@dataclass
class ShadowCounts:
    sent: int = 0  # run and recorded (its answer or its error)
    dropped: int = 0  # the queue was full: never run


class ShadowRunner:
    def __init__(
        self, run: Run, capture: DataCapture, *, max_pending: int = 64, threads: int = 2
    ) -> None:
        self._run = run
        self._capture = capture
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
                self._shadow(model, version, request, primary)
            except Exception:  # a bug here must not stop the thread
                logger.exception("shadow of %s version %s not recorded", model, version)

    def _shadow(self, model: str, version: int, request: InferRequest, primary: int) -> None:
        began = time.perf_counter()
        try:
            outputs = self._run(model, version, request)
            answer = encode_infer_response(model, version, request, outputs).body
        except Exception as exc:  # the shadow's failure is what it recorded
            answer = orjson.dumps({"error": str(exc)})
        latency_ms = round((time.perf_counter() - began) * 1000, 3)
        exchange = Exchange(
            model,
            version,
            request_body(request),
            JSON,
            answer,
            JSON,
            metadata={"shadow": True, "primaryVersion": primary, "latencyMs": latency_ms},
        )
        self._capture.queue(_RECORDED, exchange)
        with self._lock:
            self.counts.sent += 1


def request_body(request: InferRequest) -> bytes:
    """The request as v2 JSON (the shadow's record of what it was asked)."""
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
    return orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY)


def shadow_runner(server: Callable[[], ModelServer], capture: DataCapture) -> ShadowRunner:
    """A long-running process's shadow traffic: each copy run on the model server (looked up
    per copy) in the runner's threads, recorded through the process's payload capture."""

    def run(model: str, version: int, request: InferRequest) -> Mapping[str, Any]:
        return server().infer(model, version, request, lambda _served, outputs: outputs)

    return ShadowRunner(run, capture)
