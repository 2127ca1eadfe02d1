"""TorchServe's stateful handlers (pytorch/serve examples/stateful/sequence_batching): a
``sequenceBatching`` archive's requests carry a ``ts_request_sequence_id`` (the server mints
``ts-seq-<uuid>`` for a first request that has none and answers the id), and the handler
reads it with ``context.get_sequence_id(idx)``; here through `lambdaserve serve` over HTTP
and TorchServe's gRPC, the handler in its worker process."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import httpx

from lambdaserve.protocol.grpc.protos import torchserve_inference_pb2 as pb
from lambdaserve.protocol.grpc.protos import torchserve_inference_pb2_grpc as inference
from tests.integration.grpc_support import lambdaserve_serve
from tests.support import wait_until

# The example's handler, its LRU cache a dict (the example's `lru` package is not needed
# to show what the server does): the running sum of a sequence lives in the handler.
HANDLER = b"""
_sums = {}


def handle(data, context):
    if data is None:
        return None
    answers = []
    for idx, row in enumerate(data):
        sequence_id = context.get_sequence_id(idx)
        body = row.get("data") or row.get("body")
        if isinstance(body, (bytes, bytearray)):
            body = body.decode("utf-8")
        _sums[sequence_id] = _sums.get(sequence_id, 0) + int(body)
        answers.append(_sums[sequence_id])
    return answers
"""
MANIFEST = {
    "createdOn": "27/11/2026 13:00:00",
    "runtime": "python",
    "model": {
        "modelName": "stateful",
        "handler": "handler.py",
        "modelVersion": "1.0",
        "configFile": "model-config.yaml",
    },
    "archiverVersion": "0.12.0",
}
CONFIG = b"""minWorkers: 1
maxWorkers: 1
sequenceMaxIdleMSec: 60000
maxSequenceJobQueueSize: 10
sequenceBatching: true
"""


def test_a_stateful_handler_gets_its_sequence_id_and_the_client_gets_a_minted_one(stack):
    # Given the stateful example's shape, unpacked as a .mar's folder
    stack.put("models/stateful/1/MAR-INF/MANIFEST.json", json.dumps(MANIFEST).encode())
    stack.put("models/stateful/1/handler.py", HANDLER)
    stack.put("models/stateful/1/model-config.yaml", CONFIG)
    stack.wait_state("stateful", 1, "READY")
    with lambdaserve_serve() as served, httpx.Client(timeout=30) as client:
        url = f"http://127.0.0.1:{served.http}/predictions/stateful"
        # When a first request comes without a sequence id
        first = client.post(url, content=b"3", headers={"content-type": "text/plain"})
        minted = first.headers.get("ts_request_sequence_id", "")
        # and the next steps send the id it was answered, another sequence between them
        second = client.post(url, content=b"4", headers={"ts_request_sequence_id": minted})
        other = client.post(url, content=b"100", headers={"ts_request_sequence_id": "seq_b"})
        third = client.post(url, content=b"5", headers={"ts_request_sequence_id": minted})
        # and over TorchServe's gRPC Predictions: one sequence named, one left to the server
        with grpc.insecure_channel(served.grpc_url) as channel:
            stub = inference.InferenceAPIsServiceStub(channel)

            def predict(value: bytes, sequence_id: str | None = None) -> pb.PredictionResponse:
                named = {"sequence_id": sequence_id} if sequence_id else {}
                sent = pb.PredictionsRequest(model_name="stateful", input={"data": value}, **named)
                return stub.Predictions(sent, timeout=30)

            by_grpc = [predict(b"1", "seq_g"), predict(b"2", "seq_g"), predict(b"9")]
    # Then the server minted TorchServe's kind of id and answered it, and the handler kept
    # each sequence's sum by the id it read from its context
    assert first.status_code == 200, first.text
    assert minted.startswith("ts-seq-")
    assert [r.json() for r in (first, second, other, third)] == [3, 7, 100, 12]
    assert other.headers["ts_request_sequence_id"] == "seq_b"
    assert [json.loads(r.prediction) for r in by_grpc] == [1, 3, 9]
    assert [r.sequence_id for r in by_grpc[:2]] == ["seq_g", "seq_g"]
    assert by_grpc[2].sequence_id.startswith("ts-seq-")


# The same sum, and a step that holds its worker until the test opens a gate: "wait:<dir>"
# writes <dir>/started, then waits for <dir>/gate (so a sequence's next steps queue)
GATED_HANDLER = b"""
import os
import time

_sums = {}


def handle(data, context):
    if data is None:
        return None
    answers = []
    for idx, row in enumerate(data):
        sequence_id = context.get_sequence_id(idx)
        body = row.get("data") or row.get("body")
        if isinstance(body, (bytes, bytearray)):
            body = body.decode("utf-8")
        if body.startswith("wait:"):
            folder = body[len("wait:"):]
            open(os.path.join(folder, "started"), "w").close()
            deadline = time.monotonic() + 60
            while not os.path.exists(os.path.join(folder, "gate")) and time.monotonic() < deadline:
                time.sleep(0.02)
            body = "0"
        _sums[sequence_id] = _sums.get(sequence_id, 0) + int(body)
        answers.append(_sums[sequence_id])
    return answers
"""
LIMITED = b"""minWorkers: 1
maxWorkers: 1
sequenceBatching: true
maxNumSequence: 1
sequenceMaxIdleMSec: 1000
maxSequenceJobQueueSize: 1
"""


def test_torchserves_sequence_limits_end_header_and_idle_are_applied(stack, tmp_path):
    # Given a stateful handler whose model-config.yaml allows one open sequence, one
    # request waiting behind a sequence's running one, and 1 s of idleness
    manifest = {**MANIFEST, "model": {**MANIFEST["model"], "modelName": "limited"}}
    stack.put("models/limited/1/MAR-INF/MANIFEST.json", json.dumps(manifest).encode())
    stack.put("models/limited/1/handler.py", GATED_HANDLER)
    stack.put("models/limited/1/model-config.yaml", LIMITED)
    stack.wait_state("limited", 1, "READY")
    with lambdaserve_serve() as served, httpx.Client(timeout=60) as client:
        url = f"http://127.0.0.1:{served.http}/predictions/limited"

        def send(body: str, sequence_id: str = "", end: bool = False) -> httpx.Response:
            headers = {"content-type": "text/plain"}
            if sequence_id:
                headers["ts_request_sequence_id"] = sequence_id
            if end:
                headers["ts_request_sequence_end"] = "true"
            return client.post(url, content=body.encode(), headers=headers)

        # When a sequence is open, a second one asks in; the first ends (its END header);
        # the second asks again
        first = send("3")
        minted = first.headers["ts_request_sequence_id"]
        refused = send("100", "b")
        ended = send("4", minted, end=True)
        admitted = send("100", "b")
        # and, while one of b's steps holds the worker, two more of b's steps come at once
        with ThreadPoolExecutor(3) as pool:
            held = pool.submit(send, f"wait:{tmp_path}", "b")
            wait_until((tmp_path / "started").exists, 60)
            racing = [pool.submit(send, "1", "b") for _ in range(2)]
            wait_until(lambda: any(f.done() for f in racing), 60)
            (tmp_path / "gate").touch()
            queued = sorted(f.result().status_code for f in racing)
            released = held.result()
        # and, b idle past sequenceMaxIdleMSec, a third sequence asks in
        time.sleep(1.2)
        after_idle = send("5", "c")
    # Then the second sequence waited for the first's END (503 saying why before), b's
    # steps ran one at a time with one waiting (the third refused), and b's idleness
    # closed it, so c was admitted
    assert [first.json(), ended.json(), admitted.json()] == [3, 7, 100]
    assert refused.status_code == 503 and "maxNumSequence" in refused.json()["error"]
    assert queued == [200, 503] and released.json() == 100
    assert after_idle.status_code == 200 and after_idle.json() == 5
