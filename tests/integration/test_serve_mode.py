"""`lambdaserve serve` (dynamic batching under uvicorn) and `lambdaserve worker`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from lambdaserve.local.emulator import free_port
from lambdaserve.processes.background import BackgroundServer
from lambdaserve.processes.serve import build_serving_app
from tests import builders
from tests.support import scrape, wait_until

MLP = builders.onnx_mlp(4, 3)


def test_concurrent_requests_are_batched_and_each_answered_correctly(stack):
    stack.put("models/mlp/config.pbtxt", b"dynamic_batching { max_queue_delay_microseconds: 2000 }")
    stack.put("models/mlp/1/model.onnx", MLP)
    stack.wait_state("mlp", 1, "READY")
    server = BackgroundServer(build_serving_app(batching=True), "127.0.0.1", free_port()).start()
    rows = np.random.default_rng(5).random((64, 4), dtype=np.float32)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:

            def infer(i: int) -> list[float]:
                body = {
                    "inputs": [
                        {
                            "name": "INPUT__0",
                            "datatype": "FP32",
                            "shape": [1, 4],
                            "data": rows[i].tolist(),
                        }
                    ]
                }
                response = client.post("/v2/models/mlp/infer", json=body)
                assert response.status_code == 200, response.text
                return list(response.json()["outputs"][0]["data"])

            with ThreadPoolExecutor(16) as pool:
                answers = list(pool.map(infer, range(64)))
            bad = client.post(
                "/v2/models/mlp/infer",
                json={
                    "inputs": [
                        {"name": "INPUT__0", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}
                    ]
                },
            )
            assert bad.status_code == 400 and "INPUT__0" in bad.json()["error"]
            stats = client.get("/v2/models/mlp/stats").json()["model_stats"][0]
    finally:
        server.stop()
    expected = ort.InferenceSession(MLP).run(None, {"INPUT__0": rows})[0]
    np.testing.assert_allclose(np.array(answers), expected, rtol=1e-6)
    assert stats["inference_count"] == 64
    assert max(b["batch_size"] for b in stats["batch_stats"]) > 1
    assert stats["execution_count"] < 64


def test_the_worker_consumes_the_requests_queue(stack):
    stack.put("models/mlp/1/model.onnx", MLP)
    stack.wait_state("mlp", 1, "READY")
    stack.pause_requests()  # the worker, not the in-process pump, must do the work
    for i in range(5):
        stack.clients.sqs.send_message(
            QueueUrl=stack.resources.requests.url,
            MessageBody=json.dumps(
                {
                    "id": f"w-{i}",
                    "model_name": "mlp",
                    "inputs": [
                        {
                            "name": "INPUT__0",
                            "datatype": "FP32",
                            "shape": [1, 4],
                            "data": [1, 2, 3, 4],
                        }
                    ],
                }
            ),
        )
    worker = subprocess.Popen(
        [sys.executable, "-m", "lambdaserve.cli", "worker", "--poll-wait", "1"],
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        store = stack.process.consumer.queued._results
        for i in range(5):
            record = wait_until(
                lambda i=i: (r := store.get(f"w-{i}")) is not None and r.status != "PENDING" and r,
                60,
            )
            assert record.status == "SUCCESS"
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0


def test_a_full_queue_answers_503_as_triton_does_and_counts_a_rejected_failure(stack):
    # Given a model that waits up to 5 s for a batch of 8 and queues at most one request
    stack.put(
        "models/queued/config.pbtxt",
        b"max_batch_size: 8 dynamic_batching { max_queue_delay_microseconds: 5000000 "
        b"preferred_batch_size: [8] default_queue_policy { max_queue_size: 1 } }",
    )
    stack.put("models/queued/1/model.onnx", MLP)
    stack.wait_state("queued", 1, "READY")
    server = BackgroundServer(build_serving_app(batching=True), "127.0.0.1", free_port()).start()
    row = np.ones((1, 4), np.float32)
    try:
        with (
            httpx.Client(base_url=server.url, timeout=30) as http,
            ThreadPoolExecutor(1) as pool,
        ):
            first = pool.submit(
                http.post,
                "/v2/models/queued/infer",
                json={"inputs": [_tensor(row)]},
            )
            pending = ("nv_inference_pending_request_count", "queued", "1")
            wait_until(lambda: scrape(http).get(pending) == 1)
            # When a second request arrives while the first waits for company
            client = triton.InferenceServerClient(server.url.removeprefix("http://"))
            tensor = triton.InferInput("INPUT__0", [1, 4], "FP32")
            tensor.set_data_from_numpy(row)
            with pytest.raises(InferenceServerException) as refused:
                client.infer("queued", [tensor])
            # Then it is refused at once, 503 as Triton answers, and the first still serves
            assert refused.value.status() == "503"
            assert "Exceeds maximum queue size" in refused.value.message()
            assert first.result().status_code == 200
            found = scrape(http)
    finally:
        server.stop()
    assert found[("nv_inference_request_failure", "queued", "1/REJECTED")] == 1


def _tensor(data: np.ndarray) -> dict[str, object]:
    return {
        "name": "INPUT__0",
        "datatype": "FP32",
        "shape": list(data.shape),
        "data": data.ravel().tolist(),
    }


def test_every_protocols_route_meets_in_one_batch(stack):
    # Given a model whose batcher waits for company
    stack.put(
        "models/mlp/config.pbtxt",
        b"max_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 500000 }",
    )
    stack.put("models/mlp/1/model.onnx", MLP)
    stack.wait_state("mlp", 1, "READY")
    rows = np.random.default_rng(11).random((4, 4), dtype=np.float32)
    server = BackgroundServer(build_serving_app(batching=True), "127.0.0.1", free_port()).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            assert client.get("/v2/models/mlp/ready").status_code == 200  # loaded first
            calls = [
                ("/v2/models/mlp/infer", {"inputs": [
                    {"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4],
                     "data": rows[0].tolist()}]}),
                ("/predictions/mlp", [rows[1].tolist()]),
                ("/v1/models/mlp:predict", {"instances": [rows[2].tolist()]}),
                ("/mlp/prediction", {"key": ["INPUT__0"], "value": [str([rows[3].tolist()])]}),
            ]  # fmt: skip
            for path, body in calls:  # each route once: first calls import their codecs
                assert client.post(path, json=body).status_code == 200
            before = client.get("/v2/models/mlp/stats").json()["model_stats"][0]
            # When one request comes through each protocol's route at the same time
            with ThreadPoolExecutor(len(calls)) as pool:
                answers = list(pool.map(lambda c: client.post(c[0], json=c[1]), calls))
            assert [a.status_code for a in answers] == [200] * 4, [a.text for a in answers]
            stats = client.get("/v2/models/mlp/stats").json()["model_stats"][0]
    finally:
        server.stop()
    # Then the model ran once for all four: v2, TorchServe, TF Serving and Paddle batch together
    assert stats["inference_count"] - before["inference_count"] == 4
    assert stats["execution_count"] - before["execution_count"] == 1, stats["batch_stats"]
    expected = ort.InferenceSession(MLP).run(None, {"INPUT__0": rows})[0]
    np.testing.assert_allclose(answers[2].json()["predictions"][0], expected[2], rtol=1e-5)
