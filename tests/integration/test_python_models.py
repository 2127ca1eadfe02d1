"""Python models in Triton's Python-backend format, published by upload and called with
tritonclient: add_sub as Triton's example behaves, and BLS calls of an ONNX model (sync and
async) with the same resolution, cache and runtime as HTTP."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from tests import builders
from tests.support import wait_until

MODELS = Path(__file__).parent.parent / "fixtures" / "python_models"
MLP = builders.onnx_mlp(4, 3)


def publish(stack, name: str) -> None:
    for file in sorted((MODELS / name).rglob("*")):
        if file.is_file():
            stack.put(
                f"models/{name}/{file.relative_to(MODELS / name).as_posix()}", file.read_bytes()
            )


@pytest.fixture
def client(stack):
    url = str(stack.inference.base_url).removeprefix("http://").rstrip("/")
    with triton.InferenceServerClient(url) as tc:
        yield tc


@pytest.mark.parametrize("binary", [False, True])
def test_add_sub_runs_unchanged(stack, client, binary):
    publish(stack, "add_sub")
    stack.wait_state("add_sub", 1, "READY")
    a = np.array([1, 2, 3, 4], np.float32)
    b = np.array([10, 20, 30, 40], np.float32)
    inputs = []
    for name, value in (("INPUT0", a), ("INPUT1", b)):
        tensor = triton.InferInput(name, [4], "FP32")
        tensor.set_data_from_numpy(value, binary_data=binary)
        inputs.append(tensor)
    outputs = [triton.InferRequestedOutput(n, binary_data=binary) for n in ("OUTPUT0", "OUTPUT1")]
    result = client.infer("add_sub", inputs, outputs=outputs)
    assert result.as_numpy("OUTPUT0").tolist() == (a + b).tolist()
    assert result.as_numpy("OUTPUT1").tolist() == (a - b).tolist()
    config = client.get_model_config("add_sub")
    assert config["backend"] == "python"
    # its metadata's platform is the backend's name, as Triton reports a config without one
    assert client.get_model_metadata("add_sub")["platform"] == "python"
    [entry] = stack.api.get("/models/add_sub/1").json()
    assert entry["runtime"] == "python"


@pytest.mark.parametrize("model", ["bls_mlp", "bls_mlp_async"])
def test_bls_calls_an_onnx_model_in_process(stack, client, model):
    stack.put("models/mlp/1/model.onnx", MLP)
    publish(stack, model)
    stack.wait_state("mlp", 1, "READY")
    stack.wait_state(model, 1, "READY")
    x = np.random.default_rng(0).random((2, 4), dtype=np.float32)
    tensor = triton.InferInput("INPUT0", [2, 4], "FP32")
    tensor.set_data_from_numpy(x)
    got = client.infer(model, [tensor]).as_numpy("OUTPUT0")
    expected = ort.InferenceSession(MLP).run(None, {"INPUT__0": x})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    # The BLS call went through the server: mlp's statistics count it
    [stats] = client.get_inference_statistics("mlp")["model_stats"]
    assert stats["inference_count"] >= 2


def test_a_bls_error_comes_back_as_the_models_error(stack, client):
    stack.put("models/mlp/1/model.onnx", MLP)
    publish(stack, "bls_mlp")
    stack.wait_state("bls_mlp", 1, "READY")
    tensor = triton.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.array([[-1, 0, 0, 0]], np.float32))
    unknown = "BLS call failed: Request for unknown model: 'ghost' is not found"
    with pytest.raises(InferenceServerException, match=unknown):
        client.infer("bls_mlp", [tensor])


def test_python_models_answer_with_the_dynamic_batcher_too(stack):
    from lambdaserve.local.emulator import free_port
    from lambdaserve.processes.background import BackgroundServer
    from lambdaserve.processes.serve import build_serving_app

    publish(stack, "add_sub")
    stack.wait_state("add_sub", 1, "READY")
    server = BackgroundServer(build_serving_app(batching=True), "127.0.0.1", free_port()).start()
    try:
        with triton.InferenceServerClient(server.url.removeprefix("http://")) as tc:
            a = triton.InferInput("INPUT0", [4], "FP32")
            a.set_data_from_numpy(np.ones(4, np.float32))
            b = triton.InferInput("INPUT1", [4], "FP32")
            b.set_data_from_numpy(np.full(4, 2, np.float32))
            assert tc.infer("add_sub", [a, b]).as_numpy("OUTPUT0").tolist() == [3.0] * 4
    finally:
        server.stop()


FINALIZING = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.version = args["model_version"]

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
        return responses

    def finalize(self):
        with open(MARKS, "a") as marks:
            marks.write(f"finalize {self.version}\\n")
"""
ECHO_CONFIG = b"""backend: "python"
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }]
"""


def test_finalize_runs_on_unload_eviction_and_shutdown(stack, monkeypatch, tmp_path: Path):
    from lambdaserve.local.emulator import free_port
    from lambdaserve.processes.background import BackgroundServer
    from lambdaserve.processes.serve import build_serving_app
    from lambdaserve.settings import get_settings

    # Given a Python model whose finalize() leaves a mark, on a server holding one model
    marks = tmp_path / "marks.txt"
    stack.put("models/fin/config.pbtxt", ECHO_CONFIG)
    stack.put("models/fin/1/model.py", FINALIZING.replace("MARKS", repr(str(marks))).encode())
    stack.put("models/mlp/1/model.onnx", builders.onnx_mlp(4, 3))
    stack.wait_state("fin", 1, "READY")
    stack.wait_state("mlp", 1, "READY")
    monkeypatch.setenv("LAMBDASERVE_MAX_LOADED_VERSIONS", "1")
    get_settings.cache_clear()
    stack.process.forget("server", settings=get_settings())
    echo = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
    row = {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": [0] * 4}]}

    def called(model: str, body: dict[str, object]) -> None:
        response = stack.inference.post(f"/v2/models/{model}/infer", json=body)
        assert response.status_code == 200, response.text

    def finalized() -> list[str]:
        return marks.read_text().splitlines() if marks.exists() else []

    # When it is unloaded through the repository API, as Triton's clients unload
    called("fin", echo)
    assert stack.inference.post("/v2/repository/models/fin/unload").status_code == 200
    after_unload = finalized()
    assert stack.inference.post("/v2/repository/models/fin/load").status_code == 200
    # and evicted by another model (the server holds one)
    called("fin", echo)
    called("mlp", row)
    after_eviction = finalized()
    # and loaded in a server that shuts down
    server = BackgroundServer(build_serving_app(batching=True), "127.0.0.1", free_port()).start()
    with triton.InferenceServerClient(server.url.removeprefix("http://")) as tc:
        assert tc.is_model_ready("fin")
    server.stop()
    # Then finalize ran each time, once
    assert after_unload == ["finalize 1"]
    assert after_eviction == ["finalize 1"] * 2
    assert finalized() == ["finalize 1"] * 3


def test_auto_complete_config_fills_in_a_config_less_model(stack, client):
    # Given a model.py with auto_complete_config and no config file (python_backend's example)
    publish(stack, "auto_complete")
    # Then it validates with what its auto_complete_config declared
    stack.wait_state("auto_complete", 1, "READY", timeout_s=60)
    config = client.get_model_config("auto_complete")
    assert [i["name"] for i in config["input"]] == ["INPUT0", "INPUT1"]
    assert config["max_batch_size"] == 4 and "dynamic_batching" in config
    # and answers batched requests as Triton would
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = np.ones((2, 4), np.float32)
    inputs = []
    for name, value in (("INPUT0", a), ("INPUT1", b)):
        tensor = triton.InferInput(name, [2, 4], "FP32")
        tensor.set_data_from_numpy(value)
        inputs.append(tensor)
    result = client.infer("auto_complete", inputs)
    assert result.as_numpy("OUTPUT0").tolist() == (a + b).tolist()
    # When a config file then declares a datatype the model's version contradicts
    stack.put(
        "models/auto_complete/config.pbtxt",
        b'backend: "python"\ninput [{ name: "INPUT0", data_type: TYPE_INT32, dims: [4] }]\n',
    )
    # Then the config is refused, saying why, and the version keeps serving
    reason = wait_until(
        lambda: "rejected" in (r := stack.wait_state("auto_complete", 1, "READY")) and r, 30
    )
    assert "INT32" in reason and "FP32" in reason
    assert client.infer("auto_complete", inputs).as_numpy("OUTPUT1").tolist() == (a - b).tolist()
