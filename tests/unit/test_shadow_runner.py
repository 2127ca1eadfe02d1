"""Shadow traffic's runner (serving.capture.shadow): a copy never waits and never raises in
the primary's path; a full queue drops it, counted; a shadow's failure is its record."""

from __future__ import annotations

import json
import threading

import numpy as np

from lambdaserve.protocol.v2 import InferInput, InferRequest
from lambdaserve.serving.capture.data_capture import DataCapture
from lambdaserve.serving.capture.shadow import ShadowRunner
from tests.support import wait_until

REQUEST = InferRequest((InferInput("x", "FP32", (1, 2), np.ones((1, 2), np.float32)),))


def test_a_full_queue_drops_copies_counted_and_offering_never_waits():
    # Given a shadow run held until released, and a queue of one
    release, entered = threading.Event(), threading.Event()
    written: list[bytes] = []
    capture = DataCapture(lambda key, body, kms: written.append(body), "captures", writer=False)

    def run(model, version, request):
        entered.set()
        release.wait(10)
        return {"y": np.zeros((1, 2), np.float32)}

    runner = ShadowRunner(run, capture, max_pending=1, threads=1)
    # When five copies are offered while the one thread is busy with the first
    runner.offer("m", 2, REQUEST, 1)
    assert entered.wait(5)
    for _ in range(4):
        runner.offer("m", 2, REQUEST, 1)  # returns at once: the test would hang otherwise
    # Then one runs, one waits, and three are dropped, counted
    wait_until(lambda: runner.counts.dropped == 3, 5)
    release.set()
    wait_until(lambda: runner.counts.sent == 2, 5)
    capture.flush()
    [line, *_] = b"".join(written).splitlines()
    assert json.loads(line)["eventMetadata"]["shadow"] is True


def test_a_shadow_that_raises_is_recorded_with_its_error():
    # Given a shadow version that raises
    written: list[bytes] = []
    capture = DataCapture(lambda key, body, kms: written.append(body), "captures", writer=False)

    def run(model, version, request):
        raise RuntimeError("broken")

    runner = ShadowRunner(run, capture)
    # When a copy is offered
    runner.offer("m", 2, REQUEST, 1)
    # Then its record says the error, and nothing is raised to the offerer
    wait_until(lambda: runner.counts.sent == 1, 5)
    capture.flush()
    record = json.loads(b"".join(written).splitlines()[0])
    assert json.loads(record["captureData"]["endpointOutput"]["data"]) == {"error": "broken"}
