"""OpenVINO at publish and where it serves: IR files, backend "openvino" on model.onnx,
answers equal to onnxruntime's, broken IRs refused, and OpenVINO missing said plainly."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from lambdaserve.catalog import version_policy
from lambdaserve.config.model_config import ModelConfig, build, parse_document
from lambdaserve.errors import ModelRejected, RuntimeMissing
from lambdaserve.runtimes.base import LoadOptions
from lambdaserve.runtimes.openvino.readers import READERS
from lambdaserve.runtimes.openvino.runtime import MISSING
from lambdaserve.runtimes.registry import runtime_named
from lambdaserve.serving.version_resolver import ServedVersion
from lambdaserve.tensors.signature import TensorSpec
from lambdaserve.wiring.inference import build_model_server
from tests import builders
from tests.unit.test_validation import validate

pytest.importorskip("openvino")
pytestmark = pytest.mark.openvino

OPENVINO = ModelConfig(name="ov", backend="openvino")


def config_of(text: bytes, name: str = "ov") -> ModelConfig:
    return build(parse_document("config.pbtxt", text), name)


def onnxruntime_answer(model: bytes, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return list(session.run(None, feed))


def test_an_ir_validates_with_openvino_and_its_signature(aws, tmp_path: Path):
    # Given the IR of an MLP 4 -> 3, as openvino.save_model writes it
    files = builders.openvino_ir(builders.onnx_mlp(4, 3), tmp_path)
    # When it is published with no config at all
    result = validate(aws, "ir", 1, files)
    # Then OpenVINO validated it, from model.xml, with the model's own signature
    assert (result.runtime, result.model_file) == ("openvino", "model.xml")
    assert result.signature.inputs == (TensorSpec("INPUT__0", "FP32", (-1, 4)),)
    assert result.signature.outputs == (TensorSpec("OUTPUT__0", "FP32", (-1, 3)),)
    assert {f.path for f in result.files} == {"model.xml", "model.bin"}


def test_backend_openvino_runs_model_onnx_through_openvino(aws):
    # Given one ONNX file, published twice: with backend "openvino", and without a config
    model = builders.onnx_cnn()
    chosen = validate(aws, "ov", 1, {"model.onnx": model}, OPENVINO)
    default = validate(aws, "plain", 1, {"model.onnx": model})
    # Then the config chose the runtime, and both read the same signature
    assert (chosen.runtime, chosen.model_file) == ("openvino", "model.onnx")
    assert default.runtime == "onnxruntime"
    assert chosen.signature == default.signature


@pytest.mark.parametrize("kind", ["ir", "onnx"])
@pytest.mark.parametrize("rows", [1, 5])
def test_openvino_answers_what_onnxruntime_computes(tmp_path: Path, kind, rows):
    rng = np.random.default_rng(rows)
    for model, name, shape in (
        (builders.onnx_mlp(784, 10), "INPUT__0", (rows, 784)),
        (builders.onnx_cnn(), "image", (rows, 3, 8, 8)),
    ):
        # Given a model under OpenVINO (its IR, or the ONNX file itself)
        directory = tmp_path / f"{kind}-{name}"
        if kind == "ir":
            builders.openvino_ir(model, directory)
            path = directory / "model.xml"
        else:
            directory.mkdir()
            path = directory / "model.onnx"
            path.write_bytes(model)
        runtime = runtime_named("openvino")
        signature = runtime.inspect(path, OPENVINO)
        loaded = runtime.load(path, OPENVINO, signature, LoadOptions())
        # When both runtimes take the same inputs
        feed = {name: rng.standard_normal(shape).astype(np.float32)}
        feed[name].flags.writeable = rows == 1  # binary bodies arrive as read-only views
        output = signature.outputs[0].name
        answer = loaded.run(feed, [output])
        # Then OpenVINO (f32 inference, no bf16 on CPUs that have it) answers the same
        assert loaded.device == "cpu"
        assert answer[output].dtype == np.float32
        np.testing.assert_allclose(
            answer[output], onnxruntime_answer(model, feed)[0], rtol=1e-5, atol=1e-6
        )


def test_runs_from_many_threads_each_get_their_own_answer(tmp_path: Path):
    path = tmp_path / "model.onnx"
    path.write_bytes(builders.onnx_mlp(4, 3))
    runtime = runtime_named("openvino")
    loaded = runtime.load(path, OPENVINO, runtime.inspect(path, OPENVINO), LoadOptions())
    inputs = [np.full((1, 4), i, np.float32) for i in range(16)]
    expected = [loaded.run({"INPUT__0": x}, ["OUTPUT__0"])["OUTPUT__0"] for x in inputs]
    answers: dict[int, np.ndarray] = {}

    def ask(i: int) -> None:
        for _ in range(20):
            answers[i] = loaded.run({"INPUT__0": inputs[i]}, ["OUTPUT__0"])["OUTPUT__0"]

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for i, answer in answers.items():
        np.testing.assert_array_equal(answer, expected[i])


def test_bf16_travels_as_ml_dtypes_arrays(tmp_path: Path):
    from lambdaserve.tensors.encoding import bfloat16

    path = tmp_path / "model.onnx"
    path.write_bytes(builders.onnx_bf16(4))
    runtime = runtime_named("openvino")
    signature = runtime.inspect(path, OPENVINO)
    assert signature.inputs == (TensorSpec("x", "BF16", (-1, 4)),)
    loaded = runtime.load(path, OPENVINO, signature, LoadOptions())
    x = np.array([[1.5, -2.0, 0.25, 3.0]], dtype=bfloat16())
    answer = loaded.run({"x": x}, ["doubled", "as_float"])
    assert answer["doubled"].dtype == bfloat16()
    np.testing.assert_array_equal(answer["doubled"].astype(np.float32), [[3.0, -4.0, 0.5, 6.0]])
    np.testing.assert_array_equal(answer["as_float"], [[1.5, -2.0, 0.25, 3.0]])


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda f: {**f, "model.xml": f["model.xml"][:300]}, "OpenVINO cannot read model.xml"),
        (lambda f: {"model.xml": f["model.xml"]}, r"upload model.bin \(its weights\) beside"),
        (lambda f: {**f, "model.bin": f["model.bin"][:10]}, "Incorrect weights in bin file"),
        (lambda f: {**f, "model.xml": b"<html>not a model</html>"}, "cannot read model.xml"),
    ],
    ids=["truncated-xml", "no-bin", "truncated-bin", "not-xml"],
)
def test_a_broken_ir_is_refused_at_publish_with_the_reason(aws, tmp_path: Path, damage, why):
    files = damage(builders.openvino_ir(builders.onnx_mlp(4, 3), tmp_path))
    with pytest.raises(ModelRejected, match=why) as caught:
        validate(aws, "broken", 1, files)
    # And the reason speaks of the user's files, not of the scratch directory
    assert str(aws.settings.work_dir) not in caught.value.message
    assert "validate-" not in caught.value.message


def test_a_config_the_ir_fails_is_refused(aws, tmp_path: Path):
    files = builders.openvino_ir(builders.onnx_mlp(4, 3), tmp_path)
    config = config_of(
        b'backend: "openvino"\nmax_batch_size: 8\n'
        b'input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ 5 ] }]'
    )
    with pytest.raises(ModelRejected, match="model's dimension 1 is 4"):
        validate(aws, "ov", 1, files, config)


def test_backend_openvino_needs_a_file_openvino_reads(aws):
    with pytest.raises(ModelRejected, match="backend 'openvino' needs model.xml or model.onnx"):
        validate(aws, "ov", 1, {"model.pt": builders.plain_pickle()}, OPENVINO)


def test_an_ir_beside_model_onnx_is_ambiguous(aws, tmp_path: Path):
    files = builders.openvino_ir(builders.onnx_mlp(4, 3), tmp_path)
    with pytest.raises(ModelRejected, match="keep exactly one"):
        validate(aws, "both", 1, {**files, "model.onnx": builders.onnx_mlp(4, 3)})


def test_every_file_openvino_reads_is_one_a_config_can_select_or_openvino_serves():
    from lambdaserve.config.checks import BACKEND_FILES
    from lambdaserve.config.model_files import MODEL_FILES

    assert set(BACKEND_FILES["openvino"]) == set(READERS)
    served = {name for name, runtime in MODEL_FILES.items() if runtime == "openvino"}
    assert served == set(READERS) - {"model.onnx"}


def test_without_openvino_the_version_is_unavailable_naming_the_fix_then_validates(
    aws, monkeypatch: pytest.MonkeyPatch
):
    # Given a process where openvino cannot be imported (a None entry makes import fail)
    monkeypatch.setitem(sys.modules, "openvino", None)
    aws.put("models/ov/config.pbtxt", builders.OPENVINO_CONFIG)
    aws.put("models/ov/1/model.onnx", builders.onnx_mlp(4, 3))
    # When the version is published
    aws.services.registrar.reconcile_model("ov")
    record = aws.services.catalog.get_version("ov", 1)
    # Then it is UNAVAILABLE saying what to install, and that is not remembered as a fact
    assert record.state == version_policy.UNAVAILABLE
    assert record.reason == MISSING and "lambdaserve[openvino]" in record.reason
    assert record.fingerprint == ""
    # When OpenVINO becomes available and the model is loaded (Triton's load)
    monkeypatch.delitem(sys.modules, "openvino")
    aws.services.manager.load("ov")
    # Then the same upload validates, with OpenVINO
    record = aws.services.catalog.get_version("ov", 1)
    assert (record.state, record.runtime) == (version_policy.READY, "openvino")


def test_without_openvino_the_runtime_says_so_before_reading_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    path = tmp_path / "model.xml"
    path.write_bytes(b"anything")
    monkeypatch.setitem(sys.modules, "openvino", None)
    with pytest.raises(RuntimeMissing, match=r"make dev OPENVINO=1.*lambdaserve\[openvino\]"):
        runtime_named("openvino").inspect(path, OPENVINO)


def test_a_config_choosing_openvino_revalidates_a_served_onnx_version(aws):
    # Given an ONNX version READY under onnxruntime
    aws.put("models/m/1/model.onnx", builders.onnx_mlp(4, 3))
    aws.services.registrar.reconcile_model("m")
    assert aws.services.catalog.get_version("m", 1).runtime == "onnxruntime"
    # When a config arrives choosing backend "openvino"
    aws.put("models/m/config.pbtxt", builders.OPENVINO_CONFIG)
    aws.services.registrar.reconcile_model("m")
    # Then the version validated again, and OpenVINO serves it
    record = aws.services.catalog.get_version("m", 1)
    assert (record.state, record.runtime) == (version_policy.READY, "openvino")
    # And dropping the backend hands it back to onnxruntime
    aws.put("models/m/config.pbtxt", b'name: "m"\n')
    aws.services.registrar.reconcile_model("m")
    assert aws.services.catalog.get_version("m", 1).runtime == "onnxruntime"


def test_the_model_server_serves_an_ir_and_reports_the_openvino_platform(aws, tmp_path: Path):
    from lambdaserve.protocol.v2 import InferInput, InferRequest

    model = builders.onnx_mlp(4, 3)
    for name, body in builders.openvino_ir(model, tmp_path).items():
        aws.put(f"models/ir/1/{name}", body)
    aws.services.registrar.reconcile_model("ir")
    server = build_model_server(aws.settings, aws.clients)
    served: ServedVersion = server.resolver.resolve("ir", None)
    assert served.platform == "openvino"
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    response = server.infer(
        "ir",
        None,
        InferRequest(inputs=(InferInput("INPUT__0", "FP32", (2, 4), x),)),
        lambda _, outputs: outputs,
    )
    np.testing.assert_allclose(
        response["OUTPUT__0"],
        onnxruntime_answer(model, {"INPUT__0": x})[0],
        rtol=1e-5,
        atol=1e-6,
    )
