"""Paddle Serving's classic example as its users have it: uci_housing_model (Paddle 1.x's
``__model__`` with one file per parameter) and a re-saved program keeping the ``mul``
operator, built by paddle itself, uploaded through the bucket, READY only after the serving
side loaded them, answering v2 and Paddle Serving's pipeline API with what Paddle's own
predictor computed; and the same models as the Op folder of Paddle Serving's
simple_web_service pipeline, answering its PipelineClient."""

from __future__ import annotations

import json
import logging
import re
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pytest

from tests.integration.grpc_support import lambdaserve_serve
from tests.integration.test_grpc_peers import paddle_stubs, peer  # noqa: F401 (a fixture)
from tests.paddle_models import INPUT, build_paddle_models, version_files

# paddle's native library is loaded here: these tests run in a pytest process of their own
# (`make test` runs `-m own_process` after the rest), see the marker in pyproject.toml
pytestmark = [
    pytest.mark.own_process,
    pytest.mark.skipif(
        find_spec("paddle") is None, reason="paddlepaddle is not installed (make install-test)"
    ),
]


@pytest.fixture(scope="module")
def paddle_models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("paddle")
    return root, build_paddle_models(root)


def v2_infer(stack, model: str) -> dict:
    x = {"name": "x", "shape": list(INPUT.shape), "datatype": "FP32"}
    body = {"inputs": [{**x, "data": INPUT.ravel().tolist()}]}
    response = stack.inference.post(f"/v2/models/{model}/infer", json=body)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize("layout", ["uci_housing", "mul_pdmodel"])
def test_paddle_1x_models_answer_what_paddle_computed(stack, paddle_models, layout, caplog):
    caplog.set_level(logging.INFO, logger="lambdaserve.publishing.registrar")
    # Given the model uploaded into a version as paddle wrote it
    root, expected = paddle_models
    for name, body in version_files(root, layout).items():
        stack.put(f"models/uci/1/{name}", body)
    # When the stack publishes it
    stack.wait_state("uci", 1, "READY", timeout_s=90)
    record = stack.services.catalog.get_version("uci", 1)
    # Then Paddle Inference serves it, loaded where it serves before READY
    assert record.runtime == "paddle_inference"
    loaded = [r.getMessage() for r in caplog.records if r.name.endswith("registrar")]
    assert any(line.startswith("uci version 1 loaded in the infer process") for line in loaded)
    # And v2 answers Paddle's own numbers, under Paddle's output name
    name, answer = expected[layout]
    (output,) = v2_infer(stack, "uci")["outputs"]
    assert (output["name"], output["shape"]) == (name, [4, 1])
    np.testing.assert_allclose(np.array(output["data"]).reshape(4, 1), answer, rtol=1e-6)
    # And model metadata names the platform as Triton's Paddle backend does
    assert stack.inference.get("/v2/models/uci").json()["platform"] == "paddle"
    assert stack.inference.get("/v2/models/uci/config").json()["backend"] == "paddle"


def test_uci_housing_answers_paddle_servings_pipeline_api(stack, paddle_models):
    # Given uci_housing_model published
    root, expected = paddle_models
    for name, body in version_files(root, "uci_housing").items():
        stack.put(f"models/uci/1/{name}", body)
    stack.wait_state("uci", 1, "READY", timeout_s=90)
    # When PipelineClient's request arrives (a numpy repr per key)
    answer = stack.inference.post(
        "/uci/prediction", json={"key": ["x"], "value": [repr(INPUT)], "logid": 1}
    ).json()
    # Then it answers as Paddle computed
    name, values = expected["uci_housing"]
    assert (answer["err_no"], answer["key"]) == (0, [name])
    np.testing.assert_allclose(json.loads(answer["value"][0]), values, rtol=1e-5)


UCI_PIPELINE = Path(__file__).parents[1] / "fixtures" / "paddle_uci_pipeline"
# Paddle Serving's uci_housing_model ships this beside __model__: Paddle's names to aliases
SERVING_CONF = """feed_var { name: "x" alias_name: "x" is_lod_tensor: false feed_type: 1 shape: 13 }
fetch_var { name: "FETCH" alias_name: "price" is_lod_tensor: false fetch_type: 1 shape: 1 }
"""


@pytest.mark.parametrize("layout", ["uci_housing", "mul_pdmodel"])
def test_simple_web_service_over_uci_housing_answers_pipeline_client(
    stack,
    paddle_models,
    paddle_stubs,  # noqa: F811
    layout,
):
    """Given Paddle Serving's simple_web_service (web_service.py, config.yml) with its
    uci_housing_model folder in the version: Paddle 1.x's __model__ and one file per
    parameter, or the same program re-saved as inference.pdmodel (keeping mul),
    When Paddle's PipelineClient sends rows of x over gRPC, and the README's curl over HTTP,
    Then the pipeline is READY (its Op's model on Paddle Inference, as a standalone model
    of that layout: OpenVINO reads neither) and both get price: what Paddle's own predictor
    computed, as the Op's string of it."""
    root, expected = paddle_models
    name, values = expected[layout]
    for path in sorted(UCI_PIPELINE.iterdir()):
        stack.put(f"models/uci/1/{path.name}", path.read_bytes())
    for file, body in version_files(root, layout).items():
        named = file.replace("model.", "inference.")  # as Paddle Serving's Op folders name it
        stack.put(f"models/uci/1/uci_housing_model/{named}", body)
    conf = SERVING_CONF.replace("FETCH", name).encode()
    stack.put("models/uci/1/uci_housing_model/serving_server_conf.prototxt", conf)
    stack.wait_state("uci", 1, "READY", timeout_s=90)
    rows = ";".join(",".join(repr(float(v)) for v in row) for row in INPUT)
    with lambdaserve_serve() as served:
        answer = peer(
            "paddle_client.py", served.grpc_url, {"feed": {"x": rows}, "name": ""}, paddle_stubs
        )
    curl = stack.inference.post("/uci/prediction", json={"key": ["x"], "value": [rows]})
    for got in (answer, curl.json()):
        assert (got["err_no"], got["key"]) == (0, ["price"]), got
        price = np.array(re.findall(r"[-+]?\d+\.?\d*(?:e[-+]?\d+)?", got["value"][0]), float)
        np.testing.assert_allclose(price.reshape(values.shape), values, rtol=1e-5)
