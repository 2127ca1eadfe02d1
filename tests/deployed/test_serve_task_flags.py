"""The serve task's tracing and rate limiter set through template parameters
(ServerModeTraceConfig, ServerModeRateLimit, ServerModeRateLimitResources), as `serve`'s flags
set them in dev: the task started from its task definition's command and variables, under its
task role. --model-control-mode is ModelControlMode: it governs Triton's load / unload, which
the management API answers (the deployed task never does: ServerModeManagement is refused at
deploy)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from lambdaserve.local.http_api_event import http_api_event
from tests import builders
from tests.deployed.stack import DeployedStack, deployed
from tests.deployed.test_server_mode import SERVER_MODE

pytestmark = pytest.mark.deployed
CONFIG = """
max_batch_size: 8
instance_group [ {{ count: 1 kind: KIND_CPU {rate_limiter} }} ]
"""
HUNGRY = 'rate_limiter { resources [ { name: "R1" count: 4 } ] }'


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DeployedStack, Path]]:
    # Given the server-mode stack deployed with the serve task's tracing (every request, to a
    # Triton trace file written after each trace) and its rate limiter giving 3 of R1, as
    # template parameters
    work = tmp_path_factory.mktemp("serve-flags")
    trace_file = work / "traces.json"
    parameters = {
        **SERVER_MODE,
        "ServerModeTraceConfig": f"triton,file={trace_file} triton,log-frequency=1 "
        "level=TIMESTAMPS rate=1",
        "ServerModeRateLimit": "execution_count",
        "ServerModeRateLimitResources": "R1:3",
        "ModelControlMode": "none",
    }
    with deployed(work / "stack", parameters) as stack:
        # and two ONNX models: one whose instance needs 4 of R1
        for name, limiter in (("plain", ""), ("hungry", HUNGRY)):
            config = CONFIG.format(rate_limiter=limiter).encode()
            model = builders.onnx_mlp(4, 3)
            stack.publish(name, {"config.pbtxt": config, "1/model.onnx": model})
        stack.task("ServerModeTaskDefinition")
        yield stack, trace_file


def client(stack: DeployedStack) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(f"127.0.0.1:{stack.ports[8000]}")


def rows() -> list[httpclient.InferInput]:
    given = httpclient.InferInput("INPUT__0", [1, 4], "FP32")
    given.set_data_from_numpy(np.ones((1, 4), np.float32))
    return [given]


def read(path: Path) -> list[dict[str, Any]]:
    try:
        return list(json.loads(path.read_text()))
    except ValueError:  # being written
        return []


def test_the_trace_parameter_traces_every_request(served):
    stack, trace_file = served
    http = client(stack)
    # Then the serve task's trace settings are the parameter's
    settings = http.get_trace_settings()
    assert settings["trace_level"] == ["TIMESTAMPS"]
    assert (settings["trace_rate"], settings["log_frequency"]) == ("1", "1")
    # When a request comes
    http.infer("plain", rows(), request_id="deployed-0")
    # Then its trace, with the data plane's stamps, is in the trace file
    deadline, ours, traces = time.monotonic() + 30, [], []
    while not ours and time.monotonic() < deadline:
        time.sleep(0.2)
        traces = [
            t for f in sorted(trace_file.parent.glob(f"{trace_file.name}.*")) for t in read(f)
        ]
        ours = [t for t in traces if t.get("request_id") == "deployed-0"]
    assert ours, f"no trace of the request in {sorted(trace_file.parent.iterdir())}"
    assert ours[0]["model_name"] == "plain"
    stamps = {s["name"] for t in traces for s in t.get("timestamps", [])}
    assert {"COMPUTE_START", "COMPUTE_END"} <= stamps


def test_the_rate_limit_parameters_bound_what_loads(served):
    stack, _ = served
    http = client(stack)
    # When a request reaches the model whose instance needs 4 of R1 (the parameter gives 3)
    with pytest.raises(InferenceServerException) as refused:
        http.infer("hungry", rows())
    # Then Triton's reason, from the limiter the parameters configured
    assert 'Resource count for "R1" is limited to 3' in refused.value.message()
    # And the model that needs none answers
    assert http.infer("plain", rows()).as_numpy("OUTPUT__0").shape == (1, 3)


def test_the_lambda_path_says_it_does_not_apply_the_rate_limiter(served):
    stack, _ = served
    # When the management API, as deployed, describes the model whose instance group has a
    # rate_limiter
    event = http_api_event("GET", "/models/hungry", b"")
    answer = stack.invoke("ManageApiFunction", event)
    assert answer["statusCode"] == 200, answer
    [described] = json.loads(answer["body"])
    # Then its configWarnings say where the rate limiter applies, and that the infer function
    # does not apply it
    warnings = " | ".join(described["configWarnings"])
    assert "instance_group rate_limiter is applied by `serve` and `dev`" in warnings
    assert "not by the infer function" in warnings


def test_the_model_control_mode_parameter_governs_load_and_unload(served):
    stack, _ = served
    # When Triton's load reaches the management API deployed with ModelControlMode=none
    event = http_api_event("POST", "/v2/repository/models/plain/load", b"")
    answer = stack.invoke("ManageApiFunction", event)
    # Then it is refused as Triton refuses it (503, UNAVAILABLE), in its words, naming the mode
    assert answer["statusCode"] == 503, answer
    said = json.loads(answer["body"])["error"]
    assert "explicit model load / unload is not allowed if polling is enabled" in said
    assert "LAMBDASERVE_MODEL_CONTROL_MODE=none" in said
