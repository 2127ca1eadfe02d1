"""Both OpenAPI documents are true: schemathesis generates requests from them and every answer
is documented, well-formed and never a 5xx (a 405 names what is allowed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests import builders

CHECKS_LEFT_OUT = (
    # generated bodies are valid by the schema yet name models that do not exist: 404 is right
    "positive_data_acceptance",
    # no auth locally; resources are not created by the API under test
    "ignored_auth,use_after_free,ensure_resource_availability",
)


def schemathesis(url: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    executable = Path(sys.executable).with_name("schemathesis")
    return subprocess.run(
        [
            str(executable),
            "run",
            f"{url}/openapi.json",
            "--checks",
            "all",
            "--exclude-checks",
            ",".join(CHECKS_LEFT_OUT),
            "--max-examples",
            "25",
            "--phases",
            "examples,fuzzing",
            "--seed",
            "20261122",
            "--generation-deterministic",
            "--workers",
            "1",
            "--no-color",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        check=False,
    )


@pytest.mark.parametrize("document", ["inference", "management"])
def test_schemathesis_finds_nothing(stack, tmp_path, document):
    stack.put("models/mlp/1/model.onnx", builders.onnx_mlp(4, 3))
    stack.wait_state("mlp", 1, "READY")
    client = stack.inference if document == "inference" else stack.api
    spec = client.get("/openapi.json").json()
    assert all(
        "422" not in op["responses"] for ops in spec["paths"].values() for op in ops.values()
    )
    result = schemathesis(str(client.base_url).rstrip("/"), tmp_path)
    assert result.returncode == 0, result.stdout[-6000:]
    assert "passed" in result.stdout and "failed" not in result.stdout.split("SUMMARY")[-1]


def test_the_hot_routes_are_documented_with_their_bodies(stack):
    spec = stack.inference.get("/openapi.json").json()
    infer = spec["paths"]["/v2/models/{model}/infer"]["post"]
    assert infer["requestBody"]["content"]["application/json"]["schema"]["required"] == ["inputs"]
    assert {"200", "202", "400", "404", "413", "503"} <= set(infer["responses"])
    assert "/predictions/{model}/{version}" in spec["paths"]
    management = stack.api.get("/openapi.json").json()
    assert "requestBody" in management["paths"]["/models/{model}"]["put"]
    assert "requestBody" in management["paths"]["/v2/repository/models/{model}/load"]["post"]


def test_a_wrong_method_is_405_with_allow(stack):
    response = stack.inference.get("/v2/models/mlp/infer")
    assert response.status_code == 405 and response.headers["allow"] == "POST"
    assert "error" in response.json()
