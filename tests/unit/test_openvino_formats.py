"""TF SavedModels and Paddle models through OpenVINO, from the frameworks' own files
(tests/fixtures/peer_models, made by scripts/make_peer_fixtures.py; expected.json holds what
TensorFlow and Paddle computed on the same inputs)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

from lambdaserve.catalog import version_policy
from lambdaserve.config.model_config import build, parse_document
from lambdaserve.errors import ModelRejected
from lambdaserve.protocol.v2 import InferInput, InferRequest
from lambdaserve.tensors.signature import TensorSpec
from lambdaserve.wiring.inference import build_model_server
from tests.unit.test_validation import validate

pytest.importorskip("openvino")
pytestmark = pytest.mark.openvino

FIXTURES = Path(__file__).parents[1] / "fixtures" / "peer_models"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())["fixtures"]
# fixture -> the directory inside a version that holds its files
LAYOUT = {
    "savedmodel_mlp": "model.savedmodel/",
    "savedmodel_two_inputs": "model.savedmodel/",
    "savedmodel_bytes": "model.savedmodel/",
    "paddle_mlp": "",
    "openvino_mlp": "",
}
V2 = {"float32": "FP32", "int64": "INT64", "string": "BYTES"}


def version_files(fixture: str, prefix: str | None = None) -> dict[str, bytes]:
    root = FIXTURES / fixture
    into = LAYOUT[fixture] if prefix is None else prefix
    return {
        into + p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def tensor(spec: dict) -> np.ndarray:
    if "data_b64" in spec:
        return np.array([base64.b64decode(v) for v in spec["data_b64"]], dtype=object)
    return np.array(spec["data"], dtype=spec["dtype"])


def publish(aws, model: str, fixture: str, config: bytes = b"") -> None:
    if config:
        aws.put(f"models/{model}/config.pbtxt", config)
    for path, body in version_files(fixture).items():
        aws.put(f"models/{model}/1/{path}", body)
    aws.services.registrar.reconcile_model(model)


@pytest.mark.parametrize("fixture", sorted(LAYOUT))
def test_each_format_validates_with_the_frameworks_signature(aws, fixture):
    # Given the framework's own files, laid out as Triton's repository holds them
    result = validate(aws, fixture.replace("_", "-"), 1, version_files(fixture))
    # Then OpenVINO validated them, with the tensors the framework named
    assert result.runtime == "openvino"
    expected = EXPECTED[fixture]
    for declared, specs in (
        ("inputs", result.signature.inputs),
        ("outputs", result.signature.outputs),
    ):
        assert {t.name: (t.datatype, list(t.shape)) for t in specs} == {
            name: (V2[t["dtype"]], t["shape"]) for name, t in expected[declared].items()
        }


@pytest.mark.parametrize("fixture", sorted(LAYOUT))
def test_each_format_answers_what_its_framework_computed(aws, fixture):
    # Given a published fixture, served by the model server
    publish(aws, "m", fixture)
    assert aws.services.catalog.get_version("m", 1).state == version_policy.READY
    server = build_model_server(aws.settings, aws.clients)
    expected = EXPECTED[fixture]
    inputs = tuple(
        InferInput(name, V2[spec["dtype"]], tensor(spec).shape, tensor(spec))
        for name, spec in expected["inputs"].items()
    )
    # When the framework's inputs are sent
    answer = server.infer("m", None, InferRequest(inputs=inputs), lambda _, outputs: outputs)
    # Then the outputs are what TensorFlow / Paddle computed
    for name, spec in expected["outputs"].items():
        if spec["dtype"] == "string":
            assert answer[name].tolist() == tensor(spec).tolist()
        else:
            np.testing.assert_allclose(answer[name], tensor(spec), rtol=1e-5, atol=1e-6)


def test_metadata_names_the_format_as_triton_does(aws):
    publish(aws, "tf", "savedmodel_mlp")
    publish(aws, "pd", "paddle_mlp")
    publish(aws, "ir", "openvino_mlp")
    server = build_model_server(aws.settings, aws.clients)
    platforms = {m: server.resolver.resolve(m, None).platform for m in ("tf", "pd", "ir")}
    assert platforms == {"tf": "tensorflow_savedmodel", "pd": "paddle", "ir": "openvino"}


@pytest.mark.parametrize(
    ("config", "fixture", "runtime"),
    [
        # Triton's TensorFlow platform and backend: TensorFlow serves (checked where it serves)
        (b'platform: "tensorflow_savedmodel"', "savedmodel_mlp", "tensorflow"),
        (b'backend: "tensorflow"', "savedmodel_mlp", "tensorflow"),
        (b'backend: "openvino"', "savedmodel_mlp", "openvino"),
        (b'backend: "paddle"', "paddle_mlp", "openvino"),
        (b'backend: "openvino"', "paddle_mlp", "openvino"),
    ],
)
def test_triton_platforms_and_backends_for_these_formats_are_accepted(
    aws, config, fixture, runtime
):
    publish(aws, "m", fixture, config)
    record = aws.services.catalog.get_version("m", 1)
    assert (record.state, record.runtime) == (version_policy.READY, runtime)


def test_a_config_declaring_the_savedmodel_tensors_is_checked_against_them(aws):
    config = build(
        parse_document(
            "config.pbtxt",
            b'platform: "tensorflow_savedmodel"\nmax_batch_size: 8\n'
            b'input [{ name: "x" data_type: TYPE_FP32 dims: [ 4 ] }]\n'
            b'output [{ name: "y" data_type: TYPE_FP32 dims: [ 3 ] }]',
        ),
        "tf",
    )
    result = validate(aws, "tf", 1, version_files("savedmodel_mlp"), config)
    assert result.signature.inputs == (TensorSpec("x", "FP32", (-1, 4)),)


def test_tf_servings_own_layout_serves_as_triton_s_does(aws):
    # Given the SavedModel directly in the version directory, as TF Serving's users have it
    result = validate(aws, "tfs", 1, version_files("savedmodel_mlp", ""))
    # Then it validates with the same signature as under model.savedmodel/
    assert result.model_file == "saved_model.pb"
    assert result.signature.inputs == (TensorSpec("x", "FP32", (-1, 4)),)


@pytest.mark.parametrize(
    ("files", "why"),
    [
        (lambda: version_files("paddle_mlp_pir", ""), "Paddle 3's PIR format"),
        (
            lambda: {"model.pdmodel": (FIXTURES / "paddle_mlp" / "model.pdmodel").read_bytes()},
            r"upload model.pdiparams \(its weights\) beside model.pdmodel",
        ),
        (
            lambda: {
                k: v for k, v in version_files("savedmodel_mlp").items() if "variables" not in k
            },
            "OpenVINO cannot read the SavedModel",
        ),
        (lambda: {"model.pdmodel": b"not a paddle model" * 8}, "cannot read model.pdmodel"),
    ],
    ids=["paddle-pir", "no-pdiparams", "no-variables", "not-paddle"],
)
def test_what_openvino_cannot_read_is_refused_saying_what_to_do(aws, files, why):
    with pytest.raises(ModelRejected, match=why):
        validate(aws, "bad", 1, files())
