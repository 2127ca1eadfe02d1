"""TF Serving's and Paddle Serving's users move over: their own models (a SavedModel in TF
Serving's layout, a Paddle inference model), uploaded as they have them, answered through
their own APIs and through v2 and TorchServe's, equal to what TensorFlow and Paddle computed
(tests/fixtures/peer_models/expected.json)."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from tests.unit.test_openvino_formats import EXPECTED, FIXTURES, tensor

pytest.importorskip("openvino")


def upload(stack, model: str, fixture: str) -> None:
    root = FIXTURES / fixture
    for path in sorted(root.rglob("*")):
        if path.is_file():  # as the framework wrote it, straight into the version
            stack.put(f"models/{model}/1/{path.relative_to(root).as_posix()}", path.read_bytes())
    stack.wait_state(model, 1, "READY", timeout_s=60)


def expected(fixture: str, role: str, name: str) -> np.ndarray:
    return tensor(EXPECTED[fixture][role][name])


def test_a_savedmodel_in_tf_servings_layout_answers_tf_servings_rest_api(stack):
    # Given saved_model.pb + variables/ uploaded as TF Serving's users have them
    upload(stack, "mlp", "savedmodel_mlp")
    x, y = expected("savedmodel_mlp", "inputs", "x"), expected("savedmodel_mlp", "outputs", "y")
    # Then TF Serving's status, metadata, row and columnar predict answer as TensorFlow did
    status = stack.inference.get("/v1/models/mlp").json()["model_version_status"]
    assert status[0]["state"] == "AVAILABLE"
    signature = stack.inference.get("/v1/models/mlp/metadata").json()["metadata"]
    assert (
        signature["signature_def"]["signature_def"]["serving_default"]["inputs"]["x"]["dtype"]
        == "DT_FLOAT"
    )
    rows = stack.inference.post("/v1/models/mlp:predict", json={"instances": x.tolist()})
    np.testing.assert_allclose(rows.json()["predictions"], y, rtol=1e-5, atol=1e-6)
    columns = stack.inference.post("/v1/models/mlp:predict", json={"inputs": {"x": x.tolist()}})
    np.testing.assert_allclose(columns.json()["outputs"], y, rtol=1e-5, atol=1e-6)
    # and so do v2 and TorchServe's /predictions
    v2 = stack.inference.post(
        "/v2/models/mlp/infer",
        json={"inputs": [{"name": "x", "datatype": "FP32", "shape": [3, 4], "data": x.tolist()}]},
    ).json()
    np.testing.assert_allclose(np.reshape(v2["outputs"][0]["data"], (3, 3)), y, rtol=1e-5)
    torchserve = stack.inference.post("/predictions/mlp", json=x.tolist())
    assert torchserve.status_code == 200, torchserve.text
    np.testing.assert_allclose(torchserve.json(), y, rtol=1e-5, atol=1e-6)


def test_named_inputs_and_b64_strings_through_tf_serving(stack):
    upload(stack, "two", "savedmodel_two_inputs")
    a, b = (expected("savedmodel_two_inputs", "inputs", n).tolist() for n in ("a", "b"))
    rows = stack.inference.post(
        "/v1/models/two:predict",
        json={"instances": [{"a": a[i], "b": b[i]} for i in range(len(a))]},
    ).json()["predictions"]
    for name in ("sum", "product"):
        np.testing.assert_allclose(
            [row[name] for row in rows], expected("savedmodel_two_inputs", "outputs", name)
        )
    # Given a SavedModel over strings (rows reversed, with their indices)
    upload(stack, "text", "savedmodel_bytes")
    sent = EXPECTED["savedmodel_bytes"]["inputs"]["text"]["data_b64"]
    answer = stack.inference.post(
        "/v1/models/text:predict", json={"inputs": [{"b64": v} for v in sent]}
    )
    assert answer.status_code == 200, answer.text
    outputs = answer.json()["outputs"]
    np.testing.assert_array_equal(
        outputs["index"], expected("savedmodel_bytes", "outputs", "index")
    )
    got = [
        base64.b64decode(v["b64"]) if isinstance(v, dict) else v.encode()
        for v in outputs["reversed"]
    ]
    assert got == expected("savedmodel_bytes", "outputs", "reversed").tolist()


def test_a_paddle_model_answers_paddle_servings_pipeline_api(stack):
    # Given model.pdmodel + model.pdiparams uploaded as Paddle wrote them
    upload(stack, "uci", "paddle_mlp")
    x = expected("paddle_mlp", "inputs", "x")
    (output,) = EXPECTED["paddle_mlp"]["outputs"]
    # When PipelineClient's request shape arrives (a numpy repr per key)
    answer = stack.inference.post(
        "/uci/prediction", json={"key": ["x"], "value": [repr(x)], "logid": 1}
    ).json()
    # Then it answers as Paddle computed
    assert (answer["err_no"], answer["key"]) == (0, [output])
    np.testing.assert_allclose(
        json.loads(answer["value"][0]), expected("paddle_mlp", "outputs", output), rtol=1e-5
    )
