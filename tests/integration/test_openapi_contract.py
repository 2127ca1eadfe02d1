"""Both OpenAPI documents are true: schemathesis generates requests from them and every answer
is documented, well-formed and never a 5xx (a 405 names what is allowed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests import builders

# Every check, every phase; the few operations whose rules JSON Schema cannot state are
# configured there, each with its reason.
CONFIG = Path(__file__).with_name("schemathesis.toml")


def schemathesis(url: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    executable = Path(sys.executable).with_name("schemathesis")
    return subprocess.run(
        [
            str(executable),
            "--config-file",
            str(CONFIG),
            "run",
            f"{url}/openapi.json",
            "--checks",
            "all",
            # bounded: both documents in about 40 s on two cores, deterministic
            "--max-examples",
            "25",
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
    """Given a stack serving one model
    When schemathesis runs every check over the API's own OpenAPI document
    Then it finds no failure: what the document calls valid is accepted, what it calls
    invalid is refused, every answer is documented and every 405 names what is allowed."""
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


def test_every_method_of_a_path_is_in_allow_and_all_is_not_a_version(stack):
    """Given the management API, where FastAPI makes one route per method
    When a path is asked with a method none of its routes answers
    Then the 405's Allow names the methods of every route there, and /models/{m}/all
    (TorchServe's every version) allows only GET: "all" is not a version or label."""
    response = stack.api.request("OPTIONS", "/models/mlp")
    assert response.status_code == 405 and response.headers["allow"] == "DELETE, GET, PUT"
    response = stack.api.put("/models/mlp/all")
    assert response.status_code == 405 and response.headers["allow"] == "GET"
    response = stack.api.put("/models/mlp/labels/all", params={"version": 1})
    assert response.status_code == 400 and "all" in response.json()["error"]
