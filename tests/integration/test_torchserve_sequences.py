"""TorchServe's stateful handlers (pytorch/serve examples/stateful/sequence_batching): a
``sequenceBatching`` archive's requests carry a ``ts_request_sequence_id`` (the server mints
``ts-seq-<uuid>`` for a first request that has none and answers the id), and the handler
reads it with ``context.get_sequence_id(idx)``; here through `lambdaserve serve` over HTTP
and TorchServe's gRPC, the handler in its worker process."""

from __future__ import annotations

import json

import grpc
import httpx

from lambdaserve.protocol.grpc.protos import torchserve_inference_pb2 as pb
from lambdaserve.protocol.grpc.protos import torchserve_inference_pb2_grpc as inference
from tests.integration.grpc_support import lambdaserve_serve

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
