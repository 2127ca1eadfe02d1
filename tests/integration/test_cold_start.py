"""Cold starts: the direct v2 path starts without the web framework, preload is set through
the management API, and long-running servers prefetch new versions into their cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from lambdaserve.protocol.v2 import InferInput, InferRequest
from lambdaserve.serving.residency.prefetch import Prefetcher
from lambdaserve.wiring.inference import build_model_server
from tests import builders
from tests.support import wait_until

EVENT = Path(__file__).parent.parent / "events" / "apigw_v2_infer_json.json"
APP = Path(__file__).parents[2] / "functions" / "infer" / "app.py"
# As Lambda starts the image: the function's app.py (its handlers' module) imported first
FIRST_REQUEST = """
import importlib.util, json, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("app", sys.argv[2])
app = importlib.util.module_from_spec(spec)
spec.loader.exec_module(app)
response = app.api_handler(json.loads(Path(sys.argv[1]).read_text()), None)
heavy = ("fastapi", "starlette", "pydantic", "mangum", "onnx", "grpc")
print(json.dumps({
    "status": response["statusCode"],
    "imported": sorted(name for name in heavy if name in sys.modules),
}))
"""


def test_the_direct_v2_path_answers_without_importing_the_web_framework(stack, tmp_path):
    # Given a READY model and a fresh interpreter, as a new Lambda instance is
    stack.put("models/mlp/1/model.onnx", builders.onnx_mlp(4, 3))
    stack.wait_state("mlp", 1, "READY")
    env = {**os.environ, "LAMBDASERVE_WORK_DIR": str(tmp_path / "instance")}
    # When its first request is a v2 infer through API Gateway
    done = subprocess.run(
        [sys.executable, "-c", FIRST_REQUEST, str(EVENT), str(APP)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    # (the other lines are EMF's: the cold start's metrics)
    [answer] = [json.loads(x) for x in done.stdout.splitlines() if x.startswith('{"status"')]
    # Then it answered, and FastAPI, pydantic, Mangum, onnx and grpc were never imported
    assert answer == {"status": 200, "imported": []}, done.stderr[-2000:]


def test_preload_is_set_and_cleared_through_the_management_api(stack):
    stack.put("models/mlp/1/model.onnx", builders.onnx_mlp(4, 3))
    stack.wait_state("mlp", 1, "READY")
    # When a model is marked to preload
    marked = stack.api.put("/models/mlp", json={"preload": True})
    assert marked.status_code == 200, marked.text
    # Then the catalog and the description say so, until it is cleared
    assert stack.api.get("/models/mlp").json()[0]["preload"] is True
    assert stack.services.catalog.get_model("mlp").preload
    assert stack.api.put("/models/mlp", json={"preload": False}).status_code == 200
    assert stack.api.get("/models/mlp").json()[0]["preload"] is False
    wrong = stack.api.put("/models/mlp", json={"preload": "yes"})
    assert wrong.status_code == 400
    assert wrong.json()["error"] == '"preload" must be true or false'


def test_a_long_running_server_prefetches_new_versions_and_its_first_request_downloads_nothing(
    stack, tmp_path
):
    # Given a worker's server with its own cache, prefetching
    server = build_model_server(replace(stack.settings, work_dir=str(tmp_path / "worker")))
    prefetcher = Prefetcher(lambda: server.residency, interval_s=0.1)
    stack.put("models/m/config.pbtxt", b"max_batch_size: 8")
    stack.put("models/m/1/model.onnx", builders.onnx_mlp(4, 3, seed=1))
    stack.wait_state("m", 1, "READY")
    assert prefetcher.run_once() == [("m", 1)]
    assert prefetcher.run_once() == []  # once per version
    # When version 2 is published and becomes the default
    stack.put("models/m/2/model.onnx", builders.onnx_mlp(4, 3, seed=2))
    stack.wait_state("m", 2, "READY")
    # Then the next rounds fetch it (once the catalog view refreshes) ...
    wait_until(lambda: prefetcher.run_once() or ("m", 2) in prefetcher.fetched, timeout_s=10)
    assert prefetcher.fetched == [("m", 1), ("m", 2)]
    downloads = server.residency.downloads
    # ... and the first request for it loads from the disk cache, downloading nothing
    x = np.ones((1, 4), np.float32)
    outputs = server.infer(
        "m",
        None,
        InferRequest((InferInput("INPUT__0", "FP32", x.shape, x),)),
        lambda served, out: (served.version, out),
    )
    assert outputs[0] == 2 and server.residency.downloads == downloads


def test_ready_says_whether_this_instance_had_the_version_loaded(stack):
    stack.put("models/mlp/1/model.onnx", builders.onnx_mlp(4, 3))
    stack.wait_state("mlp", 1, "READY")
    first = stack.inference.get("/v2/models/mlp/ready").json()
    second = stack.inference.get("/v2/models/mlp/ready").json()
    assert (first["ready"], first["loaded"]) == (True, False)  # the probe loaded it
    assert (second["ready"], second["loaded"]) == (True, True)


def test_describe_shows_a_versions_cold_start_phases_after_its_first_load(stack):
    # Given a version published and READY, never asked yet
    stack.put("models/phased/1/model.onnx", builders.onnx_mlp())
    stack.wait_state("phased", 1, "READY")
    # When a client asks it once (its load here, then its first inference)
    body = {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": [1] * 4}]}
    assert stack.inference.post("/v2/models/phased/infer", json=body).status_code == 200

    # Then describe shows the cold start's phases, the first inference included
    def described() -> dict | None:
        [version] = stack.api.get("/models/phased").json()
        cold = version["coldStart"]
        return cold if "firstInferenceMs" in cold else None

    cold = wait_until(described, 15)
    assert cold["count"] >= 1 and cold["where"] == ["server"], cold
    assert cold["fetchBytes"] == len(builders.onnx_mlp())
    for phase in ("fetchMs", "loadMs", "warmupMs", "firstInferenceMs", "totalMs"):
        assert cold[phase]["p50"] >= 0 and cold[phase]["p99"] >= cold[phase]["p50"], cold
    assert cold["totalMs"]["p50"] >= cold["loadMs"]["p50"] + cold["firstInferenceMs"]["p50"]

    # And Triton's statistics of the version carry the same phases (the catalog's samples)
    [entry] = stack.inference.get("/v2/models/phased/stats").json()["model_stats"]
    assert entry["cold_start"]["fetchBytes"] == cold["fetchBytes"]
    assert entry["cold_start"]["count"] >= 1 and "loadMs" in entry["cold_start"]
