"""TF Serving's, TorchServe's and Paddle's gRPC clients against `lambdaserve serve
--grpc-port`: their own stubs, each in its own process (peer_clients/)."""

from __future__ import annotations

import base64
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from tests import builders
from tests.integration.grpc_support import DATATYPES, lambdaserve_serve, onnx_identities
from tests.integration.test_peer_models import expected, upload

CLIENTS = Path(__file__).parent / "peer_clients"
MLP = builders.onnx_mlp(4, 3)


def needs(package: str) -> None:
    """Skip without ``package``, never importing it here: its protos are the peer's own."""
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} is not installed (make test installs it)")


def peer(script: str, url: str, calls: Any, *args: str) -> Any:
    done = subprocess.run(
        [sys.executable, str(CLIENTS / script), url, json.dumps(calls), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_tf_servings_own_client_predicts_reads_metadata_and_status(stack):
    needs("tensorflow_serving")
    pytest.importorskip("openvino")
    # Given an ONNX model with a version label, and a SavedModel in TF Serving's layout
    stack.put("models/mlp/1/model.onnx", MLP)
    stack.wait_state("mlp", 1, "READY")
    assert stack.api.put("/models/mlp/labels/stable?version=1").status_code == 200
    upload(stack, "tfmlp", "savedmodel_mlp")
    rows = np.random.default_rng(11).random((3, 4), dtype=np.float32)
    onnx_out = ort.InferenceSession(MLP).run(None, {"INPUT__0": rows})[0]
    x = expected("savedmodel_mlp", "inputs", "x")
    y = expected("savedmodel_mlp", "outputs", "y")
    mlp_input = {"INPUT__0": {"data": rows.tolist(), "dtype": "float32"}}
    # and a model that returns every datatype as it came, for TensorFlow's own dtypes
    stack.put("models/identities/1/model.onnx", onnx_identities())
    stack.put("models/bf16/1/model.onnx", builders.onnx_bf16(2))
    stack.wait_state("identities", 1, "READY")
    stack.wait_state("bf16", 1, "READY")
    values = {
        name: [[1, 0], [0, 1]]
        if name == "BOOL"
        else [["a", "bc"], ["", "d"]]
        if name == "BYTES"
        else [[1, 2], [3, 4]]
        for name in DATATYPES
    }
    identities_in = {
        f"in_{name}": {
            "data": values[name],
            "dtype": "object" if name == "BYTES" else np.dtype(dtype).name,
        }
        for name, (_, dtype) in DATATYPES.items()
    }
    bf16_in = {"x": {"data": [[0.5, 1.5], [2.0, -3.0]], "dtype": "bfloat16"}}
    with lambdaserve_serve() as served:
        # When TF Serving's client calls every RPC it has
        answers = peer(
            "tfserving_client.py",
            served.grpc_url,
            [
                {"rpc": "predict", "model": "mlp", "inputs": mlp_input},
                {"rpc": "predict", "model": "mlp", "inputs": mlp_input, "typed": True},
                {"rpc": "predict", "model": "mlp", "label": "stable", "inputs": mlp_input},
                {"rpc": "predict", "model": "mlp", "version": 1, "inputs": mlp_input},
                {
                    "rpc": "predict",
                    "model": "tfmlp",
                    "inputs": {"x": {"data": x.tolist(), "dtype": "float32"}},
                },
                {"rpc": "metadata", "model": "mlp"},
                {"rpc": "metadata", "model": "tfmlp"},
                {"rpc": "status", "model": "mlp"},
                {"rpc": "predict", "model": "nope", "inputs": mlp_input},
                {"rpc": "predict", "model": "mlp", "version": 9, "inputs": mlp_input},
                {"rpc": "predict", "model": "mlp", "label": "canary", "inputs": mlp_input},
                {
                    "rpc": "predict",
                    "model": "mlp",
                    "inputs": {"wrong": {"data": [[1.0]], "dtype": "float32"}},
                },
                {"rpc": "predict", "model": "mlp", "signature": "other", "inputs": mlp_input},
                {"rpc": "status", "model": "nope"},
                {"rpc": "classify", "model": "mlp"},
                {"rpc": "predict", "model": "identities", "inputs": identities_in},
                {"rpc": "predict", "model": "bf16", "inputs": bf16_in},
            ],
        )
    # Then predictions equal ONNX Runtime's and TensorFlow's own, by every way to name a version
    for answer in answers[:4]:
        assert answer["ok"], answer
        assert answer["version"] == 1
        np.testing.assert_allclose(answer["outputs"]["OUTPUT__0"], onnx_out, rtol=1e-6)
    savedmodel = answers[4]
    assert savedmodel["ok"], savedmodel
    np.testing.assert_allclose(savedmodel["outputs"]["y"], y, rtol=1e-5, atol=1e-6)
    # metadata is a SignatureDefMap as TF Serving packs it
    assert answers[5] == {
        "ok": True,
        "inputs": {"INPUT__0": ["float32", [-1, 4]]},
        "outputs": ["OUTPUT__0"],
        "method": "tensorflow/serving/predict",
        "version": 1,
    }
    assert answers[6]["ok"] and "x" in answers[6]["inputs"]
    assert answers[7] == {"ok": True, "versions": [[1, "AVAILABLE"]]}
    # and errors carry TF Serving's codes
    codes = [(a["code"], a["details"]) for a in answers[8:14]]
    assert [c for c, _ in codes] == [
        "NOT_FOUND",
        "NOT_FOUND",
        "NOT_FOUND",
        "INVALID_ARGUMENT",
        "INVALID_ARGUMENT",
        "NOT_FOUND",
    ], codes
    assert "wrong" in codes[3][1] and "INPUT__0" in codes[3][1]
    assert "signature" in codes[4][1].lower()
    # Classify answers, as the REST API does, that the model's signature is a predict one
    assert answers[14]["code"] == "INVALID_ARGUMENT" and "Predict" in answers[14]["details"]
    # and every dtype travels as TensorFlow writes and reads it
    identities = answers[15]
    assert identities["ok"], identities
    for name in DATATYPES:
        got = identities["outputs"][f"out_{name}"]
        expected_values = np.array(values[name]).reshape(-1).tolist()
        if name == "BOOL":
            expected_values = [bool(v) for v in expected_values]
        assert got == expected_values or got == values[name], (name, got)
    assert identities["dtypes"]["out_FP16"] == "float16"
    assert identities["dtypes"]["out_UINT64"] == "uint64"
    bf16 = answers[16]
    assert bf16["ok"] and bf16["dtypes"]["doubled"] == "bfloat16"
    assert bf16["outputs"]["doubled"] == [[1.0, 3.0], [4.0, -6.0]]


@pytest.fixture(scope="module")
def torchserve_stubs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """TorchServe's inference.proto and management.proto, from the model-server.jar inside
    its own wheel, compiled with grpcio-tools."""
    import zipfile

    grpc_tools = pytest.importorskip("grpc_tools.protoc")
    spec = importlib.util.find_spec("ts")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("torchserve is not installed")
    jar = Path(next(iter(spec.submodule_search_locations))) / "frontend" / "model-server.jar"
    protos = tmp_path_factory.mktemp("torchserve-protos")
    with zipfile.ZipFile(jar) as archive:
        for name in ("inference.proto", "management.proto", "google/rpc/status.proto"):
            source = name if name.startswith("google/") else f"proto/{name}"
            (protos / name).parent.mkdir(parents=True, exist_ok=True)
            (protos / name).write_bytes(archive.read(source))
    out = tmp_path_factory.mktemp("torchserve-stubs")
    include = Path(grpc_tools.__file__).parent / "_proto"
    code = grpc_tools.main(
        [
            "protoc",
            f"-I{protos}",
            f"-I{include}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            "inference.proto",
            "management.proto",
            "google/rpc/status.proto",
        ]
    )
    assert code == 0
    return out


def test_torchserves_grpc_clients_ping_predict_and_manage(stack, torchserve_stubs):
    stack.put("models/mlp/config.pbtxt", b"version_policy: { all {} }")
    stack.put("models/mlp/1/model.onnx", MLP)
    stack.wait_state("mlp", 1, "READY")
    stack.put("models/mlp/2/model.onnx", builders.onnx_mlp(4, 3, seed=2))
    stack.wait_state("mlp", 2, "READY")
    rows = np.random.default_rng(13).random((2, 4), dtype=np.float32)
    want = {
        v: ort.InferenceSession(m).run(None, {"INPUT__0": rows})[0]
        for v, m in ((1, MLP), (2, builders.onnx_mlp(4, 3, seed=2)))
    }
    body = base64.b64encode(json.dumps(rows.tolist()).encode()).decode()
    with lambdaserve_serve("--grpc-management") as served:
        answers = peer(
            "torchserve_client.py",
            served.grpc_url,
            [
                {"rpc": "Ping"},
                {"rpc": "Predictions", "model": "mlp", "input": {"data": body}},
                {"rpc": "Predictions", "model": "mlp", "version": "1", "input": {"data": body}},
                {"rpc": "StreamPredictions", "model": "mlp", "input": {"data": body}},
                {"rpc": "StreamPredictions2", "model": "mlp", "input": {"data": body}},
                {"rpc": "DescribeModel", "model": "mlp"},
                {"rpc": "ListModels", "limit": 10},
                {"rpc": "SetDefault", "model": "mlp", "version": "1"},
                {"rpc": "Predictions", "model": "mlp", "input": {"data": body}},
                {"rpc": "Predictions", "model": "nope", "input": {"data": body}},
                {"rpc": "Predictions", "model": "mlp", "input": {"data": "bm90IGpzb24="}},
                {"rpc": "RegisterModel", "url": "https://example.com/m.mar"},
                {"rpc": "ScaleWorker", "model": "mlp"},
            ],
            str(torchserve_stubs),
        )
    assert answers[0] == {"ok": True, "health": {"status": "Healthy"}}

    def predicted(answer: dict[str, Any]) -> list[np.ndarray]:
        assert answer["ok"], answer
        return [np.array(json.loads(base64.b64decode(p))) for p in answer["predictions"]]

    # the default (latest) version, then version 1 by name, as TorchServe's clients ask
    np.testing.assert_allclose(predicted(answers[1])[0], want[2], rtol=1e-5)
    np.testing.assert_allclose(predicted(answers[2])[0], want[1], rtol=1e-5)
    assert len(predicted(answers[3])) == 1 and len(predicted(answers[4])) == 2
    described = answers[5]["msg"]
    assert {d["modelVersion"] for d in described} == {"1", "2"}
    assert {(d["runtime"], d["engine"]) for d in described} == {("onnxruntime", "OnnxRuntime")}
    assert all(d["jobQueueStatus"]["pendingRequests"] == 0 for d in described)
    assert answers[6]["msg"]["models"][0]["modelName"] == "mlp"
    assert answers[7]["ok"] and answers[7]["msg"]["status"].endswith('to "1"')
    np.testing.assert_allclose(predicted(answers[8])[0], want[1], rtol=1e-5)
    assert [a.get("code") for a in answers[9:12]] == [
        "NOT_FOUND",
        "INVALID_ARGUMENT",
        "INVALID_ARGUMENT",
    ], answers[9:]
    assert "aws s3 cp" in answers[11]["details"]
    # ScaleWorker sets a tensor model's instance count (instance_group), as for handlers
    assert answers[12] == {"ok": True, "msg": {"status": "Processing worker updates..."}}


def test_the_kserve_sdks_grpc_client_infers_raw_and_typed(stack):
    needs("kserve")
    stack.put("models/mlp/1/model.onnx", MLP)
    stack.wait_state("mlp", 1, "READY")
    rows = np.random.default_rng(17).random((2, 4), dtype=np.float32)
    want = ort.InferenceSession(MLP).run(None, {"INPUT__0": rows})[0]
    with lambdaserve_serve() as served:
        done = subprocess.run(
            [
                sys.executable,
                str(CLIENTS / "kserve_client.py"),
                served.grpc_url,
                json.dumps({"model": "mlp", "input": "INPUT__0", "rows": rows.tolist()}),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    assert answers["live"] and answers["ready"] and answers["model_ready"]
    for binary in ("True", "False"):
        answer = answers[f"binary={binary}"]
        assert answer["id"] == "k-1"
        np.testing.assert_allclose(answer["outputs"]["OUTPUT__0"], want, rtol=1e-6)


@pytest.fixture(scope="module")
def paddle_stubs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Paddle Serving's pipeline service, compiled from the descriptor its own wheel carries
    (paddle_serving_server's generated module: protobuf 3 code, so only its descriptor is
    used). make test downloads the wheel into .venv/peer-wheels."""
    import ast
    import re
    import zipfile

    from google.protobuf import descriptor_pb2

    grpc_tools = pytest.importorskip("grpc_tools.protoc")
    wheels = sorted((Path(sys.prefix) / "peer-wheels").glob("paddle_serving_server-*.whl"))
    if not wheels:
        pytest.skip("Paddle Serving's wheel is not downloaded (make test downloads it)")
    module = "paddle_serving_server/pipeline/proto/pipeline_service_pb2.py"
    with zipfile.ZipFile(wheels[-1]) as archive:
        source = archive.read(module).decode()
    literal = re.search(r"serialized_pb=(b'.*?')\n?\s*\)", source, re.S)
    assert literal is not None
    descriptor = descriptor_pb2.FileDescriptorProto.FromString(ast.literal_eval(literal[1]))
    work = tmp_path_factory.mktemp("paddle-stubs")
    descriptors = work / "pipeline_service.pb"
    descriptors.write_bytes(descriptor_pb2.FileDescriptorSet(file=[descriptor]).SerializeToString())
    code = grpc_tools.main(
        [
            "protoc",
            f"--descriptor_set_in={descriptors}",
            f"--python_out={work}",
            f"--grpc_python_out={work}",
            descriptor.name,
        ]
    )
    assert code == 0
    return work


def test_paddles_pipeline_grpc_call_is_answered_as_its_http_route(stack, paddle_stubs):
    stack.put("models/mlp/1/model.onnx", MLP)
    stack.wait_state("mlp", 1, "READY")
    rows = np.random.default_rng(19).random((1, 4), dtype=np.float32)
    want = ort.InferenceSession(MLP).run(None, {"INPUT__0": rows})[0]
    with lambdaserve_serve() as served:

        def call(**fields: Any) -> dict[str, Any]:
            answer: dict[str, Any] = peer(
                "paddle_client.py", served.grpc_url, fields, str(paddle_stubs)
            )
            return answer

        # PipelineClient names no service: the one model of this catalog answers
        unnamed = call(feed={"INPUT__0": rows.tolist()})
        named = call(feed={"INPUT__0": rows.tolist()}, name="mlp")
        wrong_key = call(feed={"x": rows.tolist()}, name="mlp")
        unknown = call(feed={"INPUT__0": rows.tolist()}, name="nope")
    for answer in (unnamed, named):
        assert answer["err_no"] == 0, answer
        assert answer["key"] == ["OUTPUT__0"]
        np.testing.assert_allclose(json.loads(answer["value"][0]), want, rtol=1e-5)
    # errors in-band, with Paddle's numbers, as its pipeline server answers them
    assert wrong_key["err_no"] == 5000 and "INPUT__0" in wrong_key["err_msg"]
    assert unknown["err_no"] == 3002
