"""The inference API served by uvicorn, driven by Triton's own client and by plain HTTP.

Every test runs twice: against the app as `lambdaserve dev` and Lambda serve it, and against
`lambdaserve serve`'s (front door + dynamic batcher), which answers v2 infer by itself.
"""

from __future__ import annotations

import httpx
import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from lambdaserve.local.emulator import free_port
from lambdaserve.processes.background import BackgroundServer
from lambdaserve.processes.serve import build_serving_app
from tests import builders

MLP = builders.onnx_mlp(4, 3)


@pytest.fixture(params=["app", "serve"])
def api(stack, request):
    """An HTTP client of the inference API: the plain app, or `lambdaserve serve`'s."""
    if request.param == "app":
        yield stack.inference
        return
    server = BackgroundServer(build_serving_app(batching=True), "127.0.0.1", free_port()).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            yield client
    finally:
        server.stop()


@pytest.fixture
def client(stack, api):
    stack.put("models/mlp/1/model.onnx", MLP)
    stack.put("models/types/1/model.onnx", builders.onnx_datatypes())
    stack.wait_state("mlp", 1, "READY")
    stack.wait_state("types", 1, "READY")
    url = str(api.base_url).removeprefix("http://").rstrip("/")
    with triton.InferenceServerClient(url) as tc:
        yield tc


def test_tritonclient_health_metadata_and_config(client):
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("mlp") and client.is_model_ready("mlp", "1")
    assert not client.is_model_ready("ghost")
    metadata = client.get_model_metadata("mlp")
    assert metadata["versions"] == ["1"] and metadata["platform"] == "onnxruntime_onnx"
    assert metadata["inputs"] == [{"name": "INPUT__0", "datatype": "FP32", "shape": [-1, 4]}]
    config = client.get_model_config("mlp")
    assert config["input"] == [
        {"name": "INPUT__0", "data_type": "TYPE_FP32", "dims": [-1, 4], "format": "FORMAT_NONE"}
    ]
    # the protocol's server name, as Triton's clients check it; ours beside it
    server = client.get_server_metadata()
    assert server["name"] == "triton" and server["implementation"].startswith("lambdaserve")
    assert server["extensions"]


@pytest.mark.parametrize("binary", [False, True])
def test_tritonclient_infer_json_and_binary(client, binary):
    x = np.random.default_rng(0).random((3, 4), dtype=np.float32)
    tensor = triton.InferInput("INPUT__0", [3, 4], "FP32")
    tensor.set_data_from_numpy(x, binary_data=binary)
    result = client.infer(
        "mlp", [tensor], outputs=[triton.InferRequestedOutput("OUTPUT__0", binary_data=binary)]
    )
    expected = ort.InferenceSession(MLP).run(None, {"INPUT__0": x})[0]
    np.testing.assert_allclose(result.as_numpy("OUTPUT__0"), expected, rtol=1e-6)


@pytest.mark.parametrize("binary", [False, True])
def test_tritonclient_datatypes_fp16_int64_bool_bytes(client, binary):
    values = {
        "half": (np.array([[0.5, 1.5, -2.0]], np.float16), "FP16"),
        "ids": (np.array([[1, 2, 3]], np.int64), "INT64"),
        "flags": (np.array([[True, False, True]]), "BOOL"),
        "text": (np.array([[b"a", "\xe9".encode(), b"xyz"]], dtype=object), "BYTES"),
    }
    inputs = []
    for name, (array, datatype) in values.items():
        tensor = triton.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array, binary_data=binary)
        inputs.append(tensor)
    outputs = [
        triton.InferRequestedOutput(n, binary_data=binary)
        for n in ("doubled", "next", "flipped", "echo")
    ]
    result = client.infer("types", inputs, outputs=outputs, model_version="1")
    assert result.as_numpy("doubled").tolist() == [[1.0, 3.0, -4.0]]
    assert result.as_numpy("doubled").dtype == np.float16
    assert result.as_numpy("next").tolist() == [[2, 3, 4]]
    assert result.as_numpy("flipped").tolist() == [[False, True, False]]
    # As with Triton: BYTES come back as bytes in binary mode, as JSON strings otherwise.
    echo = [[b"a", "\xe9".encode(), b"xyz"]] if binary else [["a", "\xe9", "xyz"]]
    assert result.as_numpy("echo").tolist() == echo


def test_tritonclient_statistics_count_what_ran(client):
    tensor = triton.InferInput("INPUT__0", [2, 4], "FP32")
    tensor.set_data_from_numpy(np.ones((2, 4), np.float32))
    for _ in range(3):
        client.infer("mlp", [tensor])
    [stats] = client.get_inference_statistics("mlp")["model_stats"]
    assert stats["inference_count"] == 6 and stats["execution_count"] == 3
    assert stats["batch_stats"][0]["batch_size"] == 2


def test_tritonclient_sees_errors_as_exceptions_with_the_message(client):
    tensor = triton.InferInput("INPUT__0", [1, 5], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 5), np.float32))
    with pytest.raises(InferenceServerException, match=r"expected shape \[-1, 4\], got \[1, 5\]"):
        client.infer("mlp", [tensor])


def test_curl_style_json_and_torchserve_routes(api, client):
    body = {
        "inputs": [
            {"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": [[1, 2, 3, 4]]}
        ]
    }
    v2 = api.post("/v2/models/mlp/versions/1/infer", json=body)
    assert v2.status_code == 200 and v2.json()["outputs"][0]["shape"] == [1, 3]
    prediction = api.post("/predictions/mlp/1", json=[1, 2, 3, 4])
    assert prediction.status_code == 200
    np.testing.assert_allclose(prediction.json(), v2.json()["outputs"][0]["data"], rtol=1e-6)
    assert api.get("/ping").json() == {"status": "Healthy"}


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "message"),
    [
        ("post", "/v2/models/ghost/infer", b'{"inputs":[]}', 400, '"inputs"'),
        (
            "post",
            "/v2/models/ghost/infer",
            b'{"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1]}]}',
            404,
            "Request for unknown model: 'ghost' is not found",
        ),
        (
            "post",
            "/v2/models/mlp/versions/9/infer",
            b'{"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1]}]}',
            404,
            "no version 9",
        ),
        ("post", "/v2/models/mlp/infer", b"{not json", 400, "not valid JSON"),
        (
            "post",
            "/v2/models/mlp/infer",
            b'{"inputs":[{"name":"INPUT__0","datatype":"INT64","shape":[1,4],"data":[1,2,3,4]}]}',
            400,
            "expected datatype FP32, got INT64",
        ),
        (
            "post",
            "/v2/models/mlp/infer",
            b'{"inputs":[{"name":"pixels","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}]}',
            400,
            "unknown input 'pixels'",
        ),
        ("post", "/v2/models/mlp/versions/one/infer", b"{}", 404, "no version label 'one'"),
        ("post", "/v2/models/mlp/versions/0/infer", b"{}", 400, "positive integers"),
        (
            "post",
            "/predictions/mlp",
            b'{"INPUT__0": [1, "x", 3, 4]}',
            400,
            "not a nested list of FP32",
        ),
        ("get", "/v2/models/ghost", None, 404, "unknown model"),
    ],
)
def test_errors_over_http(api, client, method, path, body, status, message):
    response = api.request(method.upper(), path, content=body)
    assert response.status_code == status, response.text
    assert message in response.json()["error"]


def test_oversize_requests_are_413_saying_the_limits(api, client):
    from lambdaserve.settings import get_settings

    limit = get_settings().max_request_bytes
    response = api.post("/v2/models/mlp/infer", content=b"x" * (limit + 1))
    assert response.status_code == 413
    assert "6 MB" in response.json()["error"] and "10 MB" in response.json()["error"]


def test_an_unavailable_version_is_503_with_the_reason(stack, api, client):
    stack.put("models/mlp/2/model.onnx", b"not a model at all")
    stack.wait_state("mlp", 2, "UNAVAILABLE")
    body = b'{"inputs":[{"name":"INPUT__0","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}]}'
    response = api.post("/v2/models/mlp/versions/2/infer", content=body)
    assert response.status_code == 503
    assert "UNAVAILABLE" in response.json()["error"] and "ONNX" in response.json()["error"]
    assert api.get("/v2/models/mlp/versions/2/ready").status_code == 503


def test_a_raw_binary_request_is_the_one_inputs_data(api, client):
    # Given Triton's raw binary request: no JSON header, the body is the input's bytes
    rows = np.arange(8, dtype=np.float32).reshape(2, 4)
    response = api.post(
        "/v2/models/mlp/infer",
        content=rows.tobytes(),
        headers={"Inference-Header-Content-Length": "0"},
    )
    assert response.status_code == 200, response.text
    # Then the rows' count comes from the byte size and the outputs answer in binary
    header_length = int(response.headers["Inference-Header-Content-Length"])
    result = triton.InferResult.from_response_body(response.content, False, header_length)
    expected = ort.InferenceSession(MLP).run(None, {"INPUT__0": rows})[0]
    assert np.allclose(result.as_numpy("OUTPUT__0"), expected, atol=1e-6)
    ragged = api.post(
        "/v2/models/mlp/infer",
        content=b"\x00" * 6,
        headers={"Inference-Header-Content-Length": "0"},
    )
    assert ragged.status_code == 400 and "not a whole number of FP32" in ragged.json()["error"]


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_tritonclient_compressed_requests_are_decompressed(client, algorithm):
    # Given tritonclient compressing its request body (Content-Encoding: gzip / deflate)
    x = np.random.default_rng(1).random((2, 4), dtype=np.float32)
    tensor = triton.InferInput("INPUT__0", [2, 4], "FP32")
    tensor.set_data_from_numpy(x, binary_data=False)
    result = client.infer("mlp", [tensor], request_compression_algorithm=algorithm)
    # Then the model sees the tensor as sent
    expected = ort.InferenceSession(MLP).run(None, {"INPUT__0": x})[0]
    assert np.allclose(result.as_numpy("OUTPUT__0"), expected, atol=1e-6)


def test_a_request_over_max_batch_size_is_refused_as_triton_refuses_it(stack, api):
    # Given a model whose config batches at most 16 rows
    stack.put("models/sixteen/config.pbtxt", b"max_batch_size: 16")
    stack.put("models/sixteen/1/model.onnx", MLP)
    stack.wait_state("sixteen", 1, "READY")

    def rows(count: int) -> httpx.Response:
        body = {
            "inputs": [
                {
                    "name": "INPUT__0",
                    "datatype": "FP32",
                    "shape": [count, 4],
                    "data": np.ones((count, 4)).tolist(),
                }
            ]
        }
        return api.post("/v2/models/sixteen/infer", json=body)

    # When requests of 16, 17 and 20 rows come
    full, over, far_over = rows(16), rows(17), rows(20)
    # Then 16 are answered, and more are refused with Triton's words and what to do
    assert full.status_code == 200, full.text
    for refused, count in ((over, 17), (far_over, 20)):
        assert refused.status_code == 400
        message = refused.json()["error"]
        assert "inference request batch-size must be <= 16 for 'sixteen'" in message
        assert f"{count} rows" in message and "max_batch_size" in message
    # And every other door refuses the same way: TorchServe's, TF Serving's
    seventeen = np.ones((17, 4)).tolist()
    for path, body in (
        ("/predictions/sixteen", seventeen),
        ("/v1/models/sixteen:predict", {"instances": seventeen}),
    ):
        refused = api.post(path, json=body)
        assert refused.status_code == 400, (path, refused.text)
        assert "batch-size must be <= 16" in refused.text, path
