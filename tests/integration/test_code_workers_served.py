"""Model code in workers behind the real doors (the default, as `serve` and
`lambdaserve dev` run it): TorchServe's describe lists the live workers, PUT min_worker
scales them, /metrics tells each model's worker memory, a handler's exception keeps its
traceback in the log, and a version whose code keeps crashing turns UNAVAILABLE."""

from __future__ import annotations

import base64
import logging
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import onnxruntime as ort
import pytest

from tests import builders
from tests.integration.grpc_support import lambdaserve_serve
from tests.integration.test_grpc_peers import peer, torchserve_stubs  # noqa: F401 (a fixture)
from tests.support import wait_until

WAIT_S = 120
HANDLER = """
def handle(data, context):
    if data is None:
        return None
    bodies = [bytes(row.get("body", row.get("data"))) for row in data]
    if bodies[0] == b"raise":
        raise ValueError("the handler was asked to raise")
    return [body.decode().upper() for body in bodies]
"""
CRASHING = """
import os, signal
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        os.kill(os.getpid(), signal.SIGSEGV)
"""
CRASHING_CONFIG = """
backend: "python"
input [{ name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] }]
output [{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] }]
"""


def metric(text: str, name: str, model: str) -> float:
    found = re.search(rf'^{name}{{model="{model}",version="1"}} (\S+)$', text, re.M)
    assert found, f"{name} for {model} not in /metrics"
    return float(found.group(1))


def test_describe_lists_live_workers_scaling_changes_them_and_metrics_show_memory(stack):
    """Given a handler published with model-config.yaml minWorkers 1 / maxWorkers 3,
    When it answers a prediction, is described, and is scaled with PUT min_worker=2,
    Then describe lists a live worker process (its pid, not ours; memory), then two, and
    /metrics gives the model's worker count and resident memory."""
    stack.put("models/upper/1/handler.py", HANDLER.encode())
    stack.put("models/upper/1/model-config.yaml", b"minWorkers: 1\nmaxWorkers: 3\n")
    stack.wait_state("upper", 1, "READY")
    answer = stack.inference.post("/predictions/upper", content=b"hello")
    assert answer.status_code == 200 and answer.text == "HELLO"

    [described] = stack.api.get("/models/upper").json()
    [worker] = described["workers"]
    assert worker["status"] == "READY" and worker["pid"] not in (0, os.getpid())
    assert worker["memoryUsage"] > 1_000_000 and os.path.exists(f"/proc/{worker['pid']}")
    assert (described["minWorkers"], described["maxWorkers"]) == (1, 3)

    scaled = stack.api.put("/models/upper?min_worker=2&synchronous=true")
    assert scaled.status_code == 200, scaled.text
    assert scaled.json()["status"] == "Workers scaled to 2 for model: upper"
    [described] = stack.api.get("/models/upper").json()
    assert len({w["pid"] for w in described["workers"]}) == 2
    text = stack.inference.get("/metrics").text
    assert metric(text, "lambdaserve_model_workers", "upper") == 2
    assert metric(text, "lambdaserve_model_worker_memory_bytes", "upper") > 2_000_000


def test_a_handler_exception_in_a_worker_keeps_its_traceback_in_the_log(stack, caplog):
    """Given a handler in a worker that raises,
    When a prediction makes it raise,
    Then the client gets the short message and the log has the traceback with the
    handler's own line, under the model code's logger."""
    stack.put("models/upper/1/handler.py", HANDLER.encode())
    stack.wait_state("upper", 1, "READY")
    with caplog.at_level(logging.ERROR, logger="lambdaserve.model_code"):
        answer = stack.inference.post("/predictions/upper", content=b"raise")
        assert answer.status_code == 500
        assert "the handler was asked to raise" in answer.text
        assert "Traceback" not in answer.text
        logged = wait_until(
            lambda: [r for r in caplog.records if "asked to raise" in r.getMessage()], WAIT_S
        )
    assert "Traceback" in logged[0].getMessage() and 'handler.py", line 7' in logged[0].getMessage()


def test_a_version_whose_code_keeps_crashing_turns_unavailable_with_the_reason(stack):
    """Given a Python model whose execute kills its own process with SIGSEGV,
    When it is asked five times,
    Then each request answers once that its code crashed (naming the signal), and the
    version turns UNAVAILABLE saying it crashed five times."""
    stack.put("models/crasher/config.pbtxt", CRASHING_CONFIG.encode())
    stack.put("models/crasher/1/model.py", CRASHING.encode())
    stack.wait_state("crasher", 1, "READY")
    body = {"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP32", "data": [1.0]}]}
    for _ in range(5):
        answer = stack.inference.post("/v2/models/crasher/infer", json=body, timeout=WAIT_S)
        assert answer.status_code == 500
        assert "crashed" in answer.json()["error"] and "SIGSEGV" in answer.json()["error"]
    reason = stack.wait_state("crasher", 1, "UNAVAILABLE", timeout_s=WAIT_S)
    assert "crashed 5 times" in reason


def test_a_bls_call_from_a_worker_runs_the_other_model_in_the_serving_process(stack):
    """Given an ONNX model and python_backend's BLS example calling it, in a worker,
    When the BLS model is asked, once for the ONNX model and once for a model that is not,
    Then the answer is the ONNX model's own, the ONNX model's statistics count the call
    (it ran in the serving process), and the missing model's error comes back as the
    model's error."""
    model_py = Path(__file__).parent.parent / "fixtures" / "python_models" / "bls_mlp"
    mlp = builders.onnx_mlp(4, 3)
    stack.put("models/mlp/1/model.onnx", mlp)
    stack.put("models/bls_mlp/config.pbtxt", (model_py / "config.pbtxt").read_bytes())
    stack.put("models/bls_mlp/1/model.py", (model_py / "1" / "model.py").read_bytes())
    stack.wait_state("mlp", 1, "READY")
    stack.wait_state("bls_mlp", 1, "READY")
    x = np.random.default_rng(0).random((2, 4), dtype=np.float32)
    body = {
        "inputs": [
            {"name": "INPUT0", "shape": [2, 4], "datatype": "FP32", "data": x.ravel().tolist()}
        ]
    }
    answer = stack.inference.post("/v2/models/bls_mlp/infer", json=body)
    assert answer.status_code == 200, answer.text
    [output] = answer.json()["outputs"]
    expected = ort.InferenceSession(mlp).run(None, {"INPUT__0": x})[0]
    np.testing.assert_allclose(np.array(output["data"]).reshape(2, 3), expected, rtol=1e-6)
    [worker] = stack.api.get("/models/bls_mlp").json()[0]["workers"]
    assert worker["pid"] not in (0, os.getpid())  # a worker process answered
    stats = stack.inference.get("/v2/models/mlp/stats").json()["model_stats"]
    assert stats[0]["inference_count"] >= 2
    body["inputs"][0]["data"][0] = -1.0
    ghost = stack.inference.post("/v2/models/bls_mlp/infer", json=body)
    assert ghost.status_code == 500 and "BLS call failed" in ghost.json()["error"]


def test_torchserves_grpc_client_scales_a_handlers_workers_in_serve(
    stack,
    torchserve_stubs,  # noqa: F811 (the fixture imported above)
):
    """Given `lambdaserve serve --grpc-management` with workers on and a handler published,
    When TorchServe's own gRPC client predicts, then asks ScaleWorker for min_worker=2,
    Then the prediction answers, the scaling is accepted, and DescribeModel comes to list
    two live workers with their pids."""
    stack.put("models/upper/1/handler.py", HANDLER.encode())
    stack.wait_state("upper", 1, "READY")
    hello = base64.b64encode(b"hello").decode()
    with lambdaserve_serve("--grpc-management") as served:
        predicted, scaled = peer(
            "torchserve_client.py",
            served.grpc_url,
            [
                {"rpc": "Predictions", "model": "upper", "input": {"data": hello}},
                {"rpc": "ScaleWorker", "model": "upper"},
            ],
            str(torchserve_stubs),
        )
        assert base64.b64decode(predicted["predictions"][0]) == b"HELLO"
        assert scaled["msg"] == {"status": "Processing worker updates..."}

        def workers() -> list[dict]:
            [answer] = peer(
                "torchserve_client.py",
                served.grpc_url,
                [{"rpc": "DescribeModel", "model": "upper"}],
                str(torchserve_stubs),
            )
            return answer["msg"][0]["workers"]

        listed = wait_until(lambda: len(w := workers()) == 2 and w, WAIT_S, interval_s=1)
    assert all(w["status"] == "READY" and w["pid"] > 0 for w in listed)


GATED_HANDLER = """
import time
from pathlib import Path


def handle(data, context):
    if data is None:
        return None
    if bytes(data[0].get("body") or data[0].get("data")) == b"hold":
        Path({started!r}).touch()
        while not Path({gate!r}).exists():  # held until the test opens the gate
            time.sleep(0.02)
    return ["released" for _ in data]
"""
GATED_MODEL = """
import time
from pathlib import Path

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, "INPUT0") for r in requests]
        if inputs[0].as_numpy()[0] == 2.0:
            Path({started!r}).touch()
            while not Path({gate!r}).exists():  # held until the test opens the gate
                time.sleep(0.02)
        outputs = [pb_utils.Tensor("OUTPUT0", x.as_numpy()) for x in inputs]
        return [pb_utils.InferenceResponse([y]) for y in outputs]
"""


@pytest.mark.parametrize("code", ["handler", "python_model"])
def test_model_code_held_in_its_worker_never_holds_the_serving_loop(stack, tmp_path, code):
    """Given `lambdaserve serve` with model code in workers (a handler, or a Python model
    through the dynamic batcher), loaded, and an ONNX model beside it
    When, after a quick first call (a fast model may run on the event loop), a request
    holds the code in its worker (it waits on a gate)
    Then while it is held the server stays ready and the ONNX model answers; once the gate
    opens the held request answers too."""
    started, gate = tmp_path / "started", tmp_path / "gate"
    stack.put("models/mlp/1/model.onnx", builders.onnx_mlp(4, 3))
    if code == "handler":
        source = GATED_HANDLER.format(started=str(started), gate=str(gate))
        stack.put("models/held/1/handler.py", source.encode())
        path, quick, hold = "/predictions/held", {"content": b"x"}, {"content": b"hold"}
    else:
        source = GATED_MODEL.format(started=str(started), gate=str(gate))
        stack.put("models/held/config.pbtxt", CRASHING_CONFIG.encode())
        stack.put("models/held/1/model.py", source.encode())
        tensor = {"name": "INPUT0", "shape": [1], "datatype": "FP32"}
        path = "/v2/models/held/infer"
        quick = {"json": {"inputs": [{**tensor, "data": [1.0]}]}}
        hold = {"json": {"inputs": [{**tensor, "data": [2.0]}]}}
    stack.wait_state("mlp", 1, "READY")
    stack.wait_state("held", 1, "READY")
    row = {"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": [1.0, 2, 3, 4]}
    with (
        lambdaserve_serve() as served,
        httpx.Client(base_url=f"http://127.0.0.1:{served.http}", timeout=WAIT_S) as http,
        ThreadPoolExecutor(1) as pool,
    ):
        for _ in range(3):
            assert http.post(path, **quick).status_code == 200
        held = pool.submit(http.post, path, **hold)
        wait_until(started.exists, WAIT_S)  # the code holds it in its worker now
        # a blocked loop answers neither until the gate opens: these would time out
        assert http.get("/v2/health/ready", timeout=30).status_code == 200
        other = http.post("/v2/models/mlp/infer", json={"inputs": [row]}, timeout=30)
        assert other.status_code == 200, other.text
        assert not held.done()
        gate.touch()
        answer = held.result(timeout=WAIT_S)
    assert answer.status_code == 200, answer.text
