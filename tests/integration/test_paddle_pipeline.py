"""Paddle Serving's pipeline as its users have it: web_service.py with Op subclasses and
config.yml (tests/fixtures/paddle_pipeline, written as Paddle Serving's examples/Pipeline
are), published by upload and answered on Paddle's HTTP route and its gRPC PipelineService
(called by a client packing requests as Paddle's PipelineClient does), equal to the Ops' own
arithmetic over what Paddle computed (tests/fixtures/peer_models/expected.json)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests import builders
from tests.integration.grpc_support import lambdaserve_serve
from tests.integration.test_grpc_peers import paddle_stubs, peer  # noqa: F401 (a fixture)
from tests.unit.test_openvino_formats import EXPECTED, FIXTURES, tensor

pytest.importorskip("openvino")
PIPELINE = Path(__file__).parents[1] / "fixtures" / "paddle_pipeline"
NAME = "mlp_pipeline"


def publish(stack) -> None:
    for path in sorted(PIPELINE.rglob("*")):
        if path.is_file():
            stack.put(f"models/{NAME}/1/{path.relative_to(PIPELINE).as_posix()}", path.read_bytes())
    paddle = FIXTURES / "paddle_mlp"
    for suffix in ("pdmodel", "pdiparams"):  # as paddle.static.save_inference_model names them
        model = (paddle / f"model.{suffix}").read_bytes()
        stack.put(f"models/{NAME}/1/mlp_model/inference.{suffix}", model)
    stack.wait_state(NAME, 1, "READY", timeout_s=90)


def by_hand(scale: float) -> tuple[list[int], np.ndarray]:
    """The Ops' arithmetic over Paddle's own answer: argmax, and the probabilities scaled."""
    prob = tensor(EXPECTED["paddle_mlp"]["outputs"]["softmax_0.tmp_0"])
    return prob.argmax(axis=1).tolist(), (prob * scale).round(6)


def rows_text() -> str:
    x = tensor(EXPECTED["paddle_mlp"]["inputs"]["x"])
    return ";".join(",".join(repr(float(v)) for v in row) for row in x)


def predict(stack, **values: str) -> dict:
    answer = stack.inference.post(
        f"/{NAME}/prediction", json={"key": list(values), "value": list(values.values())}
    )
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_a_web_service_with_its_config_yml_answers_as_its_ops_compute(stack):
    # Given web_service.py, config.yml and the model folder its op names, uploaded unchanged
    publish(stack)
    # When Paddle's HTTP route is called as its examples call it
    answer = predict(stack, x=rows_text(), scale="2")
    # Then the pre -> model -> post Op and the model-less Op meet in the fan-in Op
    assert answer["err_no"] == 0, answer
    assert answer["key"] == ["label", "scaled", "tries"]
    labels, scaled = by_hand(2.0)
    assert json.loads(answer["value"][0]) == labels
    np.testing.assert_allclose(json.loads(answer["value"][1]), scaled, rtol=1e-5)
    # and a product error code from an Op's preprocess reaches the client as Paddle sends it
    refused = predict(stack, x=rows_text(), scale="-1")
    assert (refused["err_no"], refused["err_msg"]) == (51, "scale must be positive")
    # and an Op that raises answers UNKNOW (10000) naming the Op's class and stage
    broken = predict(stack, scale="1")
    assert broken["err_no"] == 10000 and "ClassName: MlpOp" in broken["err_msg"]


def test_an_op_timeout_is_retried_and_answers_6000_once_tries_run_out(stack):
    publish(stack)
    # When the model op's first try overruns its 1000 ms timeout (retry: 3 in config.yml)
    retried = predict(stack, x=rows_text(), scale="1", mode="slow_once")
    # Then a later try answers
    assert retried["err_no"] == 0, retried
    assert json.loads(retried["value"][0]) == by_hand(1.0)[0]
    # When every try overruns, Paddle's TIMEOUT error answers
    timed_out = predict(stack, x=rows_text(), scale="1", mode="always_slow")
    assert timed_out["err_no"] == 6000
    assert "exceeded retry count" in timed_out["err_msg"] and "[mlp]" in timed_out["err_msg"]


def test_the_pipeline_answers_paddles_grpc_client_and_v2(stack, paddle_stubs):  # noqa: F811
    publish(stack)
    with lambdaserve_serve() as served:
        answer = peer(
            "paddle_client.py",
            served.grpc_url,
            {"feed": {"x": rows_text(), "scale": "3"}, "name": NAME},
            str(paddle_stubs),
        )
    assert answer["err_no"] == 0, answer
    labels, scaled = by_hand(3.0)
    assert json.loads(answer["value"][0]) == labels
    np.testing.assert_allclose(json.loads(answer["value"][1]), scaled, rtol=1e-5)
    # the same pipeline through KServe v2: BYTES key and value in, Paddle's fields out
    v2 = stack.inference.post(
        f"/v2/models/{NAME}/infer",
        json={
            "inputs": [
                {"name": "key", "datatype": "BYTES", "shape": [2], "data": ["x", "scale"]},
                {"name": "value", "datatype": "BYTES", "shape": [2], "data": [rows_text(), "3"]},
            ]
        },
    )
    assert v2.status_code == 200, v2.text
    outputs = {o["name"]: o["data"] for o in v2.json()["outputs"]}
    assert outputs["err_no"] == [0] and json.loads(outputs["value"][0]) == labels


def test_an_unnamed_pipeline_client_reaches_the_only_pipeline_beside_other_models(
    stack,
    paddle_stubs,  # noqa: F811
):
    """Given the pipeline and an ONNX model served beside it
    When Paddle's PipelineClient sends its request with no service name
    Then the stack's only pipeline answers it."""
    publish(stack)
    stack.put("models/other/1/model.onnx", builders.onnx_mlp(4, 3))
    stack.wait_state("other", 1, "READY")
    with lambdaserve_serve() as served:
        answer = peer(
            "paddle_client.py",
            served.grpc_url,
            {"feed": {"x": rows_text(), "scale": "2"}, "name": ""},
            str(paddle_stubs),
        )
    assert answer["err_no"] == 0, answer
    labels, _ = by_hand(2.0)
    assert json.loads(answer["value"][0]) == labels
