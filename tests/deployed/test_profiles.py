"""Every samconfig.toml profile docs/deploy.md offers, deployed as the harness deploys:
its parameter overrides read from the file, a model published and answered through it
(and through its server-mode task where the profile has one)."""

from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from lambdaserve.local.http_api_event import http_api_event
from tests import builders
from tests.deployed.stack import deployed

ROOT = Path(__file__).parents[2]
MLP = builders.onnx_mlp(4, 3)
ROWS = [[0.1, 0.2, 0.3, 0.4], [1, 2, 3, 4]]
BODY = json.dumps(
    {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [2, 4], "data": ROWS}]}
).encode()
# what a deployer writes in place of the profiles' placeholders
FILLED = {
    "ACCOUNT": "123456789012",
    "subnet-REPLACE-A": "subnet-0123456789abcdef0",
    "subnet-REPLACE-B": "subnet-0123456789abcdef1",
    "vpc-REPLACE": "vpc-0123456789abcdef0",
    "us-east-1_REPLACE": "us-east-1_AbCdEfGhI",
    "REPLACE-app-client-id": "1example23456789",
    "certificate/REPLACE": "certificate/0123abcd-0123-0123-0123-0123456789ab",
}


def profiles() -> dict[str, dict[str, str]]:
    config = tomllib.loads((ROOT / "samconfig.toml").read_text())
    found = {}
    for name, sections in config.items():
        if not isinstance(sections, dict):
            continue  # the file's version
        overrides = sections.get("deploy", {}).get("parameters", {}).get("parameter_overrides")
        if isinstance(overrides, str):
            for placeholder, value in FILLED.items():
                overrides = overrides.replace(placeholder, value)
            found[name] = dict(pair.split("=", 1) for pair in shlex.split(overrides))
    return found


PROFILES = profiles()


def test_every_profile_the_deploy_guide_names_is_here():
    guide = (ROOT / "docs/deploy.md").read_text()
    assert {name for name in PROFILES if name != "default"} <= {
        name for name in PROFILES if f"--config-env {name}" in guide
    }


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_a_model_is_published_and_answered_in_each_profile(profile: str, tmp_path: Path):
    parameters = PROFILES[profile]
    # Given the stack as the profile deploys it
    with deployed(tmp_path, parameters) as stack:
        # When an ONNX model is published and a v2 request reaches the infer function
        stack.publish("mlp", {"1/model.onnx": MLP})
        event = http_api_event("POST", "/v2/models/mlp/infer", BODY)
        answer = stack.invoke("InferFunction", event)
        # Then it answers (forwarded nowhere: a CPU model is the function's own)
        assert answer["statusCode"] == 200, answer
        # and where the profile runs CPU server mode, its task answers tritonclient's gRPC
        if (
            parameters.get("EnableServerMode") == "true"
            and parameters.get("ServerModeKind") == "cpu"
        ):
            stack.task("ServerModeTaskDefinition")
            client = grpcclient.InferenceServerClient(f"127.0.0.1:{stack.ports[8001]}")
            tensor = grpcclient.InferInput("INPUT__0", [2, 4], "FP32")
            tensor.set_data_from_numpy(np.array(ROWS, np.float32))
            outputs = client.infer("mlp", [tensor]).as_numpy("OUTPUT__0")
            client.close()
            assert outputs.shape == (2, 3)
