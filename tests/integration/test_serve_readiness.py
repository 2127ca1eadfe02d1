"""`lambdaserve serve` is ready only when it can answer, and leaves rotation on SIGTERM.

A real `serve` process (HTTP and gRPC) against the emulated stack: readiness waits for the
warm-up of the versions it serves, a version that fails to load does not hold the task out
of rotation, and SIGTERM turns readiness off while the server still answers.
"""

from __future__ import annotations

import os
import signal
import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
import httpx
import numpy as np
import onnxruntime as ort
import tritonclient.grpc as grpcclient
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests import builders
from tests.integration.grpc_support import Served, lambdaserve_serve
from tests.support import wait_until

MLP = builders.onnx_mlp(4, 3)
PYTHON_CONFIG = b"""backend: "python"
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }]
"""
# Loads only once the test opens its gate: the warm-up's progress is the test's to decide.
GATED_MODEL = """
import time
from pathlib import Path

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        while not Path({gate!r}).exists():
            time.sleep(0.05)

    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, "INPUT0") for r in requests]
        outputs = [pb_utils.Tensor("OUTPUT0", x.as_numpy()) for x in inputs]
        return [pb_utils.InferenceResponse([y]) for y in outputs]
"""
BROKEN_MODEL = b"""
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("the weights file is missing from this task")

    def execute(self, requests):
        return []
"""
ROW = {"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": [1.0, 2.0, 3.0, 4.0]}


def _health(served: Served) -> int:
    with grpc.insecure_channel(served.grpc_url) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return int(stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=30).status)


def test_serve_is_ready_only_once_its_versions_are_warm_and_not_while_draining(
    stack, tmp_path, monkeypatch
):
    """Given an ONNX model, a Python model whose load waits for a gate, and one whose load
    fails, all READY in the catalog, and `serve` started
    When it has not finished loading, then when the gate opens, then on SIGTERM
    Then it is live but not ready (HTTP 503, gRPC NOT_SERVING) until every version it
    serves is loaded, then ready without the broken one (whose requests answer its load
    error), and on SIGTERM not ready again while it still answers requests."""
    gate = tmp_path / "gate"
    # serve's own loading is what this test watches: versions reach the catalog as server
    # mode's KIND_GPU ones do, READY after the static checks, with no load at publish
    stack.process.manage.registrar.check_where_it_serves(None)
    stack.put("models/mlp/1/model.onnx", MLP)
    stack.put("models/gated/config.pbtxt", PYTHON_CONFIG)
    stack.put("models/gated/1/model.py", GATED_MODEL.format(gate=str(gate)).encode())
    stack.put("models/broken/config.pbtxt", PYTHON_CONFIG)
    stack.put("models/broken/1/model.py", BROKEN_MODEL)
    for model in ("mlp", "gated", "broken"):
        stack.wait_state(model, 1, "READY")
    monkeypatch.setenv("LAMBDASERVE_DRAIN_DELAY_S", "600")  # the second SIGTERM cuts it short
    with (
        lambdaserve_serve(ready=False) as served,
        httpx.Client(base_url=f"http://127.0.0.1:{served.http}", timeout=60) as http,
    ):
        # live at once, not ready while the gated version loads
        assert http.get("/v2/health/live").status_code == 200
        starting = http.get("/v2/health/ready")
        assert starting.status_code == 503, starting.text
        assert starting.json()["ready"] is False and "loading" in starting.json()["reason"]
        assert _health(served) == health_pb2.HealthCheckResponse.NOT_SERVING
        assert not served.client().is_server_ready()

        gate.touch()
        wait_until(lambda: http.get("/v2/health/ready").status_code == 200, 120)
        # gRPC health follows readiness on the event loop's next turns (after serve's gc
        # freeze at ready): a moment after HTTP, as a probe polling it sees
        wait_until(lambda: _health(served) == health_pb2.HealthCheckResponse.SERVING, 60)
        assert served.client().is_server_ready()
        # warmed before any request: the probe finds each version already loaded
        for model in ("mlp", "gated"):
            probe = http.get(f"/v2/models/{model}/ready").json()
            assert probe["loaded"] is True, probe
        answer = http.post("/v2/models/mlp/infer", json={"inputs": [ROW]})
        assert answer.status_code == 200, answer.text
        expected = ort.InferenceSession(MLP).run(None, {"INPUT__0": np.array([ROW["data"]], "f4")})
        np.testing.assert_allclose(answer.json()["outputs"][0]["data"], expected[0][0], rtol=1e-6)
        broken = http.post(
            "/v2/models/broken/infer",
            json={"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1]}]},
        )
        assert broken.status_code == 503, broken.text  # not ready: the version, not the task
        assert "the weights file is missing from this task" in broken.json()["error"]

        os.kill(served.process.pid, signal.SIGTERM)
        draining = wait_until(
            lambda: (r := http.get("/v2/health/ready")).status_code == 503 and r, 60
        )
        assert "shutting down" in draining.json()["reason"]
        wait_until(lambda: _health(served) == health_pb2.HealthCheckResponse.NOT_SERVING, 60)
        # still answering during the drain delay: the load balancer deregisters it first
        assert http.post("/v2/models/mlp/infer", json={"inputs": [ROW]}).status_code == 200

        os.kill(served.process.pid, signal.SIGTERM)
        assert served.process.wait(timeout=120) == 0, served.output()


def test_sigterm_under_load_drains_every_request_sent_before_it(stack, monkeypatch):
    """Given `serve` answering a model whose dynamic batcher holds each batch 200 ms, under
    load from HTTP and gRPC clients in threads (so requests are in flight and queued)
    When it receives SIGTERM, as ECS stops a task on scale-in
    Then every request sent before the signal gets its correct answer, none is lost, and
    the process exits 0 once they are done."""
    stack.put(
        "models/mlp/config.pbtxt",
        b"max_batch_size: 32 dynamic_batching { max_queue_delay_microseconds: 200000 "
        b"preferred_batch_size: [32] }",
    )
    stack.put("models/mlp/1/model.onnx", MLP)
    stack.wait_state("mlp", 1, "READY")
    rows = np.random.default_rng(7).random((64, 4), dtype=np.float32)
    expected = ort.InferenceSession(MLP).run(None, {"INPUT__0": rows})[0]
    monkeypatch.setenv("LAMBDASERVE_DRAIN_DELAY_S", "3")  # a client past its check still lands
    signalled = threading.Event()
    answers: list[tuple[int, np.ndarray | Exception, bool]] = []  # row, answer, after signal
    lock = threading.Lock()

    def record(i: int, answer: np.ndarray | Exception) -> None:
        with lock:
            answers.append((i, answer, signalled.is_set()))

    with lambdaserve_serve() as served:
        url = f"http://127.0.0.1:{served.http}"

        def http_client(worker: int) -> None:
            with httpx.Client(base_url=url, timeout=120) as client:
                n = worker
                while not signalled.is_set():
                    i = n % len(rows)
                    body = {"inputs": [{**ROW, "data": rows[i].tolist()}]}
                    try:
                        response = client.post("/v2/models/mlp/infer", json=body)
                        response.raise_for_status()
                        record(i, np.array(response.json()["outputs"][0]["data"], "f4"))
                    except Exception as exc:
                        record(i, exc)
                    n += 16

        def grpc_client(worker: int) -> None:
            client = served.client()
            n = worker
            while not signalled.is_set():
                i = n % len(rows)
                tensor = grpcclient.InferInput("INPUT__0", [1, 4], "FP32")
                tensor.set_data_from_numpy(rows[i : i + 1])
                try:
                    record(i, client.infer("mlp", [tensor]).as_numpy("OUTPUT__0")[0])
                except Exception as exc:
                    record(i, exc)
                n += 16

        with ThreadPoolExecutor(16) as pool:
            running = [pool.submit(http_client, w) for w in range(12)]
            running += [pool.submit(grpc_client, w) for w in range(12, 16)]
            wait_until(lambda: len(answers) >= 48, 120)
            # When ECS stops the task
            signalled.set()
            os.kill(served.process.pid, signal.SIGTERM)
            for future in running:
                future.result()
        # Then it exits 0 once drained
        assert served.process.wait(timeout=120) == 0, served.output()

    failed = [(i, a) for i, a, _ in answers if isinstance(a, Exception)]
    assert not failed, failed[:5]
    for i, answer, _ in answers:
        np.testing.assert_allclose(answer, expected[i], rtol=1e-5)
    # requests were in flight (waiting in the batcher) when the signal came, and finished
    assert any(after for _, _, after in answers)
