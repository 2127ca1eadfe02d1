"""OpenVINO end to end: upload -> READY -> tritonclient over HTTP, for an IR and for
model.onnx under backend "openvino"; answers equal to onnxruntime's; a broken IR and a
missing OpenVINO end UNAVAILABLE with the reason."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as triton

from tests import builders

pytest.importorskip("openvino")
pytestmark = pytest.mark.openvino


@pytest.fixture
def client(stack):
    url = str(stack.inference.base_url).removeprefix("http://").rstrip("/")
    with triton.InferenceServerClient(url) as tc:
        yield tc


def infer(client, model: str, name: str, x: np.ndarray, output: str) -> np.ndarray:
    tensor = triton.InferInput(name, list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=True)
    requested = [triton.InferRequestedOutput(output, binary_data=True)]
    result = client.infer(model, [tensor], outputs=requested)
    answer: np.ndarray = result.as_numpy(output)
    return answer


def onnxruntime_answer(model: bytes, name: str, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    answer: np.ndarray = session.run(None, {name: x})[0]
    return answer


def test_an_uploaded_ir_serves_what_onnxruntime_computes(stack, client, tmp_path: Path):
    # Given the IR of an MLP 784 -> 10 (model.xml + model.bin), and no config
    model = builders.onnx_mlp(784, 10)
    for name, body in builders.openvino_ir(model, tmp_path).items():
        stack.put(f"models/ir/1/{name}", body)
    # When it is uploaded, it becomes READY under OpenVINO
    stack.wait_state("ir", 1, "READY", timeout_s=60)
    [entry] = stack.api.get("/models/ir").json()
    assert entry["runtime"] == "openvino"
    metadata = client.get_model_metadata("ir")
    assert metadata["platform"] == "openvino"
    assert metadata["inputs"] == [{"name": "INPUT__0", "datatype": "FP32", "shape": [-1, 784]}]
    assert client.get_model_config("ir")["backend"] == "openvino"
    # Then tritonclient gets what onnxruntime computes on the same rows
    x = np.random.default_rng(0).standard_normal((3, 784)).astype(np.float32)
    np.testing.assert_allclose(
        infer(client, "ir", "INPUT__0", x, "OUTPUT__0"),
        onnxruntime_answer(model, "INPUT__0", x),
        rtol=1e-5,
        atol=1e-6,
    )


def test_backend_openvino_serves_model_onnx_through_openvino(stack, client):
    # Given a CNN as model.onnx whose config chooses Triton's OpenVINO backend
    model = builders.onnx_cnn()
    stack.put("models/cnn/config.pbtxt", builders.OPENVINO_CONFIG)
    stack.put("models/cnn/1/model.onnx", model)
    # When it is READY, OpenVINO validated and serves it
    stack.wait_state("cnn", 1, "READY", timeout_s=60)
    [entry] = stack.api.get("/models/cnn").json()
    assert entry["runtime"] == "openvino"
    # Then its answers are onnxruntime's
    x = np.random.default_rng(1).standard_normal((4, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(
        infer(client, "cnn", "image", x, "logits"),
        onnxruntime_answer(model, "image", x),
        rtol=1e-5,
        atol=1e-6,
    )


def test_a_broken_ir_is_unavailable_with_the_reason(stack, tmp_path: Path):
    files = builders.openvino_ir(builders.onnx_mlp(4, 3), tmp_path)
    stack.put("models/broken/1/model.xml", files["model.xml"][:300])
    stack.put("models/broken/1/model.bin", files["model.bin"])
    reason = stack.wait_state("broken", 1, "UNAVAILABLE", timeout_s=60)
    assert reason.startswith("OpenVINO cannot read model.xml: ")
    assert "openvino.save_model" in reason


def test_without_openvino_the_version_says_what_to_install_and_load_retries(
    stack, monkeypatch: pytest.MonkeyPatch
):
    # Given a process where openvino cannot be imported
    monkeypatch.setitem(sys.modules, "openvino", None)
    # When a model choosing backend "openvino" is uploaded
    stack.put("models/ov/config.pbtxt", builders.OPENVINO_CONFIG)
    stack.put("models/ov/1/model.onnx", builders.onnx_mlp(4, 3))
    # Then it is UNAVAILABLE naming the extra to install
    reason = stack.wait_state("ov", 1, "UNAVAILABLE", timeout_s=60)
    assert "OpenVINO is not installed" in reason and "lambdaserve[openvino]" in reason
    # When OpenVINO is there and the model is loaded (Triton's load), it validates again
    monkeypatch.delitem(sys.modules, "openvino")
    assert stack.api.post("/v2/repository/models/ov/load").status_code == 200
    stack.wait_state("ov", 1, "READY", timeout_s=60)
    [entry] = stack.api.get("/models/ov").json()
    assert entry["runtime"] == "openvino"


def test_a_savedmodel_with_strings_serves_what_tensorflow_computed(stack, client):
    from tests.unit.test_openvino_formats import EXPECTED, tensor, version_files

    # Given a TF SavedModel (string rows in, reversed rows and their indices out)
    for path, body in version_files("savedmodel_bytes").items():
        stack.put(f"models/tf/1/{path}", body)
    stack.wait_state("tf", 1, "READY", timeout_s=60)
    assert client.get_model_metadata("tf")["platform"] == "tensorflow_savedmodel"
    # When tritonclient sends BYTES in binary
    text = tensor(EXPECTED["savedmodel_bytes"]["inputs"]["text"])
    sent = triton.InferInput("text", list(text.shape), "BYTES")
    sent.set_data_from_numpy(text, binary_data=True)
    outputs = [triton.InferRequestedOutput(n, binary_data=True) for n in ("reversed", "index")]
    result = client.infer("tf", [sent], outputs=outputs)
    # Then the answers are TensorFlow's
    expected = EXPECTED["savedmodel_bytes"]["outputs"]
    assert result.as_numpy("reversed").tolist() == tensor(expected["reversed"]).tolist()
    np.testing.assert_array_equal(result.as_numpy("index"), tensor(expected["index"]))
