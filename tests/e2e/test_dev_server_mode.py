"""`lambdaserve dev --server-mode`: the deployed synchronous path on this machine. The HTTP
API as deployed forwards a KIND_GPU model's requests to a real `serve` process; with that
process killed (scaled to zero), the same request queues and is answered within the wait."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import boto3
import httpx
import numpy as np
import onnxruntime as ort
import pytest

from tests import builders
from tests.shipped import user_environment
from tests.support import free_port, wait_until

pytestmark = pytest.mark.e2e
MLP = builders.onnx_mlp(4, 3)
ROW = [[0.1, 0.2, 0.3, 0.4]]


@pytest.fixture
def dev(tmp_path: Path, dev_command: list[str]) -> Iterator[tuple[dict[str, int], Path]]:
    names = ("aws", "management", "inference", "server", "api")
    ports = {name: free_port() for name in names}
    log_path = tmp_path / "dev.log"
    log = log_path.open("w+")
    process = subprocess.Popen(
        [
            *dev_command,
            "dev",
            "--no-demo",
            "--server-mode",
            "--aws-port",
            str(ports["aws"]),
            "--management-port",
            str(ports["management"]),
            "--inference-port",
            str(ports["inference"]),
            "--grpc-port",
            "0",
            "--server-port",
            str(ports["server"]),
            "--http-api-port",
            str(ports["api"]),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        env={
            **user_environment(),
            "LAMBDASERVE_WORK_DIR": str(tmp_path / "work"),
            # the forwarded call and the queued wait, far past what a loaded machine needs:
            # the test is about which path answers, not how fast
            "LAMBDASERVE_SERVER_WAIT_S": "150",
        },
    )
    try:
        wait_until(lambda: "Ctrl-C stops everything" in log_path.read_text(), 180)
        yield ports, log_path
    finally:
        process.send_signal(signal.SIGINT)  # dev stops its `serve` too
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def infer(port: int) -> httpx.Response:
    body = {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": ROW}]}
    return httpx.post(f"http://127.0.0.1:{port}/v2/models/gpu/infer", json=body, timeout=300)


def live(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).is_success
    except httpx.TransportError:
        return False


def served_count(port: int) -> int:
    answer = httpx.get(f"http://127.0.0.1:{port}/v2/models/gpu/stats", timeout=30).json()
    return sum(int(e["inference_count"]) for e in answer["model_stats"])


def test_dev_server_mode_forwards_gpu_models_and_queues_when_serve_is_down(dev):
    ports, log = dev
    # Given a KIND_GPU model published by upload to dev's emulator
    s3 = boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{ports['aws']}",
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    s3.put_object(
        Bucket="lambdaserve-models",
        Key="models/gpu/config.pbtxt",
        Body=b"max_batch_size: 8\ninstance_group [{ kind: KIND_GPU }]",
    )
    s3.put_object(Bucket="lambdaserve-models", Key="models/gpu/1/model.onnx", Body=MLP)
    index = f"http://127.0.0.1:{ports['management']}/v2/repository/index"
    wait_until(lambda: any(e["state"] == "READY" for e in httpx.post(index).json()), 180)
    wait_until(lambda: live(f"http://127.0.0.1:{ports['server']}/v2/health/ready"), 180)
    want = ort.InferenceSession(MLP).run(None, {"INPUT__0": np.array(ROW, np.float32)})[0]
    # When the HTTP API as deployed is called, `serve` answers it
    forwarded = infer(ports["api"])
    assert forwarded.status_code == 200, forwarded.text
    np.testing.assert_allclose(forwarded.json()["outputs"][0]["data"], want.ravel(), rtol=1e-5)
    assert served_count(ports["server"]) == 1
    # When `serve` is gone (scaled to zero), the same request queues and is answered
    pid = int(re.search(r"`lambdaserve serve`, pid (\d+)", log.read_text())[1])
    os.killpg(pid, signal.SIGKILL)
    queued = infer(ports["api"])
    assert queued.status_code == 200, queued.text
    np.testing.assert_allclose(queued.json()["outputs"][0]["data"], want.ravel(), rtol=1e-5)
    assert "server mode unreachable" in log.read_text()  # it went through the queue


def test_dev_server_mode_answers_cpu_models_on_the_http_api_port(dev):
    ports, _ = dev
    # Given a CPU model (no KIND_GPU) published by upload, with `make dev ARGS="--server-mode"`
    s3 = boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{ports['aws']}",
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    s3.put_object(Bucket="lambdaserve-models", Key="models/cpu/1/model.onnx", Body=MLP)
    index = f"http://127.0.0.1:{ports['management']}/v2/repository/index"
    wait_until(lambda: any(e["state"] == "READY" for e in httpx.post(index).json()), 180)
    want = ort.InferenceSession(MLP).run(None, {"INPUT__0": np.array(ROW, np.float32)})[0]
    api = f"http://127.0.0.1:{ports['api']}"
    # When the HTTP API port is called with v2 infer and TorchServe's /predictions
    body = {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": ROW}]}
    v2 = httpx.post(f"{api}/v2/models/cpu/infer", json=body, timeout=300)
    predictions = httpx.post(f"{api}/predictions/cpu", json=ROW[0], timeout=300)
    # Then both answer there (the function itself: CPU models are not forwarded)
    assert v2.status_code == 200, v2.text
    np.testing.assert_allclose(v2.json()["outputs"][0]["data"], want.ravel(), rtol=1e-5)
    assert predictions.status_code == 200, predictions.text
    np.testing.assert_allclose(predictions.json(), want[0], rtol=1e-5)
