"""`GET /metrics`: Triton's per-model metric names and labels in Prometheus' text format, on
the inference port (`lambdaserve dev` and `serve`); `lambdaserve worker` writes the same
per-model EMF lines as the infer function."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from lambdaserve.local.emulator import free_port
from lambdaserve.processes.background import BackgroundServer
from lambdaserve.processes.serve import build_serving_app
from tests import builders
from tests.support import is_live, scrape, wait_until

TRITON_FAMILIES = {
    "nv_inference_request_success",
    "nv_inference_request_failure",
    "nv_inference_count",
    "nv_inference_exec_count",
    "nv_inference_request_duration_us",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
    "nv_inference_pending_request_count",
    # Triton's response cache families (zeros for models without response_cache)
    "nv_cache_num_hits_per_model",
    "nv_cache_num_misses_per_model",
    "nv_cache_hit_duration_per_model",
    "nv_cache_miss_duration_per_model",
}
LAMBDASERVE = [sys.executable, "-m", "lambdaserve.cli"]


def rows(width: int, count: int) -> dict[str, Any]:
    data = [float(i) for i in range(width * count)]
    return {
        "inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [count, width], "data": data}]
    }


def test_metrics_count_each_version_as_triton_names_them(stack):
    # Given a model with two serving versions of different input widths
    stack.put("models/m/config.pbtxt", b"version_policy: { all { } }")
    for version, width in ((1, 4), (2, 6)):
        stack.put(f"models/m/{version}/model.onnx", builders.onnx_mlp(width, 3, seed=version))
    for version in (1, 2):
        stack.wait_state("m", version, "READY")
    empty = scrape(stack.inference)
    # When version 1 answers three requests of two rows, and version 2 one request and one
    # refusal (a tensor of the wrong width)
    for _ in range(3):
        ok = stack.inference.post("/v2/models/m/versions/1/infer", json=rows(4, 2))
        assert ok.status_code == 200, ok.text
    assert stack.inference.post("/v2/models/m/versions/2/infer", json=rows(6, 1)).status_code == 200
    bad = stack.inference.post("/v2/models/m/versions/2/infer", json=rows(4, 1))
    assert bad.status_code == 400
    found = scrape(stack.inference)
    # Then every Triton family is there, one series per version, with Triton's counts
    assert not [key for key in empty if key[1] == "m"]
    assert {name for name, _, _ in found} == TRITON_FAMILIES
    assert found[("nv_inference_request_success", "m", "1")] == 3
    assert found[("nv_inference_request_failure", "m", "1")] == 0
    assert found[("nv_inference_count", "m", "1")] == 6  # a batch of two counts two
    assert found[("nv_inference_exec_count", "m", "1")] == 3
    assert found[("nv_inference_request_success", "m", "2")] == 1
    assert found[("nv_inference_request_failure", "m", "2")] == 1
    assert found[("nv_inference_request_failure", "m", "2/OTHER")] == 1  # the client's mistake
    assert found[("nv_inference_request_failure", "m", "2/BACKEND")] == 0
    assert found[("nv_inference_pending_request_count", "m", "1")] == 0
    assert found[("nv_inference_count", "m", "2")] == 1
    for version in ("1", "2"):
        assert found[("nv_inference_request_duration_us", "m", version)] > 0
        assert found[("nv_inference_compute_infer_duration_us", "m", version)] > 0
    # and they are the statistics extension's numbers, in microseconds
    stats = stack.inference.get("/v2/models/m/versions/1/stats").json()["model_stats"][0]
    assert found[("nv_inference_compute_infer_duration_us", "m", "1")] == (
        stats["inference_stats"]["compute_infer"]["ns"] / 1000
    )


def test_the_openapi_document_describes_metrics_as_text(stack):
    # Given the inference API's OpenAPI document
    spec = stack.inference.get("/openapi.json").json()
    # Then /metrics is a GET answering Prometheus text
    answer = spec["paths"]["/metrics"]["get"]["responses"]["200"]
    assert list(answer["content"]) == ["text/plain"]


def test_serve_answers_metrics_for_dynamically_batched_requests(stack):
    # Given `lambdaserve serve`'s app (dynamic batching, the front door) beside the dev server
    stack.put("models/mlp/config.pbtxt", b"dynamic_batching { max_queue_delay_microseconds: 2000 }")
    stack.put("models/mlp/1/model.onnx", builders.onnx_mlp(4, 3))
    stack.wait_state("mlp", 1, "READY")
    server = BackgroundServer(build_serving_app(batching=True), "127.0.0.1", free_port()).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            # When 32 clients call at once, and one sends a tensor of the wrong width
            def infer(_: int) -> int:
                return client.post("/v2/models/mlp/infer", json=rows(4, 1)).status_code

            with ThreadPoolExecutor(8) as pool:
                assert set(pool.map(infer, range(32))) == {200}
            assert client.post("/v2/models/mlp/infer", json=rows(2, 1)).status_code == 400
            found = scrape(client)
    finally:
        server.stop()
    # Then serve's /metrics counts every request once, and executions per batch
    assert found[("nv_inference_request_success", "mlp", "1")] == 32
    assert found[("nv_inference_request_failure", "mlp", "1")] == 1
    assert found[("nv_inference_count", "mlp", "1")] == 32
    assert 1 <= found[("nv_inference_exec_count", "mlp", "1")] <= 32
    assert found[("nv_inference_request_duration_us", "mlp", "1")] > 0
    assert found[("nv_inference_compute_infer_duration_us", "mlp", "1")] > 0
    assert found[("nv_inference_queue_duration_us", "mlp", "1")] >= 0
    assert found[("nv_inference_pending_request_count", "mlp", "1")] == 0  # all answered


def test_the_worker_writes_per_model_emf_lines_for_the_batches_it_runs(stack):
    # Given queued requests for a published model, and the in-process pump stopped
    stack.put("models/mlp/1/model.onnx", builders.onnx_mlp(4, 3))
    stack.wait_state("mlp", 1, "READY")
    stack.pause_requests()
    for i in range(3):
        body = {"id": f"emf-{i}", "model_name": "mlp", **rows(4, 1)}
        stack.clients.sqs.send_message(
            QueueUrl=stack.resources.requests.url, MessageBody=json.dumps(body)
        )
    # When `lambdaserve worker` runs them
    worker = subprocess.Popen(
        [sys.executable, "-m", "lambdaserve.cli", "worker", "--poll-wait", "1"],
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        store = stack.process.consumer.queued._results
        for i in range(3):
            wait_until(
                lambda i=i: (r := store.get(f"emf-{i}")) is not None and r.status == "SUCCESS",
                60,
            )
    finally:
        worker.send_signal(signal.SIGTERM)
        output, _ = worker.communicate(timeout=60)
    # Then its output holds the infer function's EMF documents for the model version
    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    emf = [d for d in lines if "Inferences" in d and d.get("model") == "mlp"]
    assert emf, output[-3000:]
    assert sum(d["Inferences"] for d in emf) == 3
    assert sum(d["InferenceErrors"] for d in emf) == 0
    assert {(d["version"], d["service"]) for d in emf} == {("1", "lambdaserve-worker")}
    directive = emf[0]["_aws"]["CloudWatchMetrics"][0]
    assert directive["Dimensions"] == [["model", "version", "service"], ["service"]]


def test_serve_answers_torchserves_metrics_api_on_its_metrics_port(stack):
    # Given `lambdaserve serve --metrics-port`, as an ECS task would run it
    stack.put("models/mlp/1/model.onnx", builders.onnx_mlp(4, 3))
    stack.wait_state("mlp", 1, "READY")
    port, metrics_port = free_port(), free_port()
    server = subprocess.Popen(
        [
            *LAMBDASERVE,
            "serve",
            "--port",
            str(port),
            "--metrics-port",
            str(metrics_port),
            "--grpc-port",
            "0",
        ],
        env=dict(os.environ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            wait_until(lambda: is_live(client), 60)
            # When it answers two predictions and one request it must refuse
            for _ in range(2):
                assert client.post("/v2/models/mlp/infer", json=rows(4, 1)).status_code == 200
            assert client.post("/v2/models/mlp/infer", json=rows(2, 1)).status_code == 400
            text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30).text
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        # uvicorn shuts down, then re-raises the signal it caught
        assert server.wait(timeout=60) in (0, -signal.SIGTERM)
    # Then TorchServe's families count them, in TorchServe's text
    assert re.search(r'^Requests4XX\{Level="Host",Hostname=".+",\} 1\.0$', text, re.M)
    requests = re.search(
        r'^ts_inference_requests_total\{model_name="mlp",model_version="1",hostname=".+",\} (\S+)$',
        text,
        re.M,
    )
    assert requests and float(requests.group(1)) == 3


def test_serve_refuses_a_metrics_port_with_several_workers():
    refused = subprocess.run(
        [
            *LAMBDASERVE,
            "serve",
            "--workers",
            "2",
            "--metrics-port",
            str(free_port()),
            "--grpc-port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert refused.returncode == 2
    assert "--metrics-port needs --workers 1" in refused.stderr
