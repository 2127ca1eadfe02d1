"""Synchronous GPU requests through the HTTP API's infer function: forwarded to a real local
`lambdaserve serve` when it is up; queued and waited for when it is not (scaled to zero),
then answered, or 202 with the status URL — never lost, never answered twice."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import httpx
import numpy as np
import onnxruntime as ort
import pytest

from lambdaserve.handlers import infer
from lambdaserve.local.emulator import free_port
from lambdaserve.local.http_api_event import http_api_event
from lambdaserve.processes.event_pump import LocalContext
from lambdaserve.settings import get_settings
from tests import builders
from tests.integration.grpc_support import lambdaserve_serve
from tests.support import wait_until

MLP = builders.onnx_mlp(4, 3)
GPU_CONFIG = b"max_batch_size: 8\ninstance_group [{ kind: KIND_GPU }]"
ROWS = np.random.default_rng(3).random((2, 4), dtype=np.float32)


def v2_body(rows: np.ndarray) -> bytes:
    tensor = {"name": "INPUT__0", "datatype": "FP32", "shape": list(rows.shape)}
    return json.dumps({"inputs": [{**tensor, "data": rows.ravel().tolist()}]}).encode()


def call(path: str, body: bytes) -> dict:
    return infer.api_handler(http_api_event("POST", path, body), LocalContext("infer"))


@pytest.fixture
def published(stack):
    stack.put("models/gpu/config.pbtxt", GPU_CONFIG)
    stack.put("models/gpu/1/model.onnx", MLP)
    stack.put("models/cpu/1/model.onnx", MLP)
    stack.wait_state("gpu", 1, "READY")
    stack.wait_state("cpu", 1, "READY")
    return stack


@pytest.fixture
def server_mode(published, monkeypatch):
    """Point the infer function at `url` (LAMBDASERVE_SERVER_URL), as the template does."""

    def point_at(url: str, wait_s: float = 25.0) -> None:
        monkeypatch.setenv("LAMBDASERVE_SERVER_URL", url)
        monkeypatch.setenv("LAMBDASERVE_SERVER_WAIT_S", str(wait_s))
        get_settings.cache_clear()
        published.process.forget("forwarder", settings=get_settings())

    yield point_at
    get_settings.cache_clear()
    published.process.forget("forwarder", settings=get_settings())


@pytest.fixture
def serve(published):
    """A real `lambdaserve serve` process (its own models and statistics), gRPC off."""
    with lambdaserve_serve() as served:
        yield f"http://127.0.0.1:{served.http}"


def stats_on(url: str, model: str) -> int:
    answer = httpx.get(f"{url}/v2/models/{model}/stats", timeout=30).json()
    return sum(int(entry["inference_count"]) for entry in answer["model_stats"])


def expected(rows: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(MLP).run(None, {"INPUT__0": rows})[0]


def test_a_gpu_model_is_answered_by_server_mode_and_a_cpu_model_here(server_mode, serve):
    # Given the service up
    server_mode(serve)
    # When the HTTP API's function gets a request for each model
    gpu = call("/v2/models/gpu/infer", v2_body(ROWS[:1]))
    cpu = call("/v2/models/cpu/infer", v2_body(ROWS[1:]))
    # Then the GPU model's request was answered by `serve`, the CPU model's here
    assert gpu["statusCode"] == 200, gpu["body"]
    output = json.loads(gpu["body"])["outputs"][0]["data"]
    np.testing.assert_allclose(output, expected(ROWS[:1])[0], rtol=1e-5)
    assert cpu["statusCode"] == 200
    assert stats_on(serve, "gpu") == 1
    assert stats_on(serve, "cpu") == 0
    # And other protocols' requests are forwarded too (TF Serving's :predict)
    predicted = call(
        "/v1/models/gpu:predict", json.dumps({"instances": [ROWS[0].tolist()]}).encode()
    )
    assert predicted["statusCode"] == 200 and stats_on(serve, "gpu") == 2


def test_at_zero_capacity_a_request_is_queued_and_answered_within_the_wait(server_mode):
    # Given no service listening (scaled to zero), and the queue's consumer running (a wait
    # far past what a loaded machine needs: the test is about the path, not its speed)
    server_mode(f"http://127.0.0.1:{free_port()}", wait_s=150)
    # When a request for the GPU model comes
    answer = call("/v2/models/gpu/infer", v2_body(ROWS[:1]))
    # Then it went through the queue and came back as a synchronous answer
    assert answer["statusCode"] == 200, answer["body"]
    output = json.loads(answer["body"])["outputs"][0]["data"]
    np.testing.assert_allclose(output, expected(ROWS[:1])[0], rtol=1e-5)


def test_past_the_wait_the_client_gets_202_and_the_result_later(server_mode, published):
    # Given no service, and a queue nobody consumes yet
    server_mode(f"http://127.0.0.1:{free_port()}", wait_s=0.5)
    published.pause_requests()
    # When a request comes, it is answered 202 with where to poll
    answer = call("/v2/models/gpu/infer", v2_body(ROWS[:1]))
    assert answer["statusCode"] == 202, answer["body"]
    status_url = json.loads(answer["body"])["status_url"]
    # Then once capacity comes (the consumer runs), the result is there, exactly once
    published.resume_requests()
    done = wait_until(
        lambda: (r := published.inference.get(status_url)).status_code == 200 and r, 30
    )
    np.testing.assert_allclose(done.json()["outputs"][0]["data"], expected(ROWS[:1])[0], rtol=1e-5)


def test_other_protocols_at_zero_capacity_are_told_to_retry(server_mode):
    server_mode(f"http://127.0.0.1:{free_port()}")
    answer = call("/v1/models/gpu:predict", json.dumps({"instances": [ROWS[0].tolist()]}).encode())
    assert answer["statusCode"] == 503 and answer["headers"]["retry-after"] == "30"
    assert "scales from zero" in json.loads(answer["body"])["error"]


def test_a_bad_request_is_refused_before_it_is_queued(server_mode, published):
    server_mode(f"http://127.0.0.1:{free_port()}")
    bad = call("/v2/models/gpu/infer", b'{"inputs": [{"name": "nope"}]}')
    assert bad["statusCode"] == 400
    assert published.queue_depth(published.resources.requests.url) == 0


# A GPU model whose first execution (the one `serve` runs) stays in execute until the test
# has killed the service; later ones (the queued path) answer at once.
SLOW_GPU_CONFIG = b"""
backend: "python"
max_batch_size: 0
instance_group [{ kind: KIND_GPU }]
input [{ name: "x", data_type: TYPE_FP32, dims: [4] }]
output [{ name: "y", data_type: TYPE_FP32, dims: [4] }]
"""
SLOW_GPU_MODEL = b"""
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        marker = os.environ["SLOW_GPU_MARKER"]
        if not os.path.exists(marker):
            open(marker, "w").close()
            time.sleep(30)  # the service dies before this returns
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("y", pb_utils.get_input_tensor_by_name(r, "x").as_numpy() * 2)]
            )
            for r in requests
        ]
"""


def test_a_service_that_dies_mid_request_leaves_it_answered_once_through_the_queue(
    server_mode, published, monkeypatch, tmp_path: Path
):
    # Given a GPU model served by a real `serve` that will die while running it
    marker = tmp_path / "executing"
    monkeypatch.setenv("SLOW_GPU_MARKER", str(marker))
    published.put("models/slow/config.pbtxt", SLOW_GPU_CONFIG)
    published.put("models/slow/1/model.py", SLOW_GPU_MODEL)
    published.wait_state("slow", 1, "READY")
    body = json.dumps(
        {"inputs": [{"name": "x", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]}]}
    ).encode()
    answers: list[dict] = []
    with lambdaserve_serve(killed=True) as served:
        # (a wait far past what a loaded machine needs: the test is about which path answers)
        server_mode(f"http://127.0.0.1:{served.http}", wait_s=150)
        # When a request is forwarded, and the service is killed while it runs the model
        caller = threading.Thread(
            target=lambda: answers.append(call("/v2/models/slow/infer", body))
        )
        caller.start()
        wait_until(marker.exists, 60)
        os.killpg(served.process.pid, signal.SIGKILL)
        caller.join(200)
    # Then the client gets one answer, computed through the queue
    [answer] = answers
    assert answer["statusCode"] == 200, answer["body"]
    assert json.loads(answer["body"])["outputs"][0]["data"] == [2, 4, 6, 8]
