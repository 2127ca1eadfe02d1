"""Hostile requests over real HTTP, through both doors (`lambdaserve dev`'s app and
`lambdaserve serve`'s front door + batcher) and the management API: 4xx, never 5xx;
slow clients are cut off."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest

from lambdaserve.local.emulator import free_port
from lambdaserve.processes.background import BackgroundServer
from lambdaserve.processes.serve import build_serving_app
from lambdaserve.settings import get_settings
from tests import builders

ONE_ROW = {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": [1] * 4}]}


@pytest.fixture(params=["app", "serve"])
def door(stack, request, monkeypatch):
    """The inference API as dev serves it, or as `lambdaserve serve` does (1 s client limit)."""
    monkeypatch.setenv("LAMBDASERVE_CLIENT_TIMEOUT_S", "1")
    get_settings.cache_clear()
    stack.put("models/mlp/1/model.onnx", builders.onnx_mlp(4, 3))
    stack.wait_state("mlp", 1, "READY")
    app = build_serving_app(batching=True) if request.param == "serve" else _dev_app()
    server = BackgroundServer(app, "127.0.0.1", free_port()).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            yield client
    finally:
        server.stop()


def _dev_app():
    from lambdaserve.wiring.process import current

    return current().inference_app


def _post(client: httpx.Client, body: bytes, headers: dict | None = None) -> httpx.Response:
    return client.post("/v2/models/mlp/infer", content=body, headers=headers or {})


def test_a_unicode_digit_and_a_5000_digit_header_are_400(door):
    binary = json.dumps(ONE_ROW).encode()
    for value in ("²".encode(), b"9" * 5000):
        # When the binary header length is not an ASCII number
        response = _post(door, binary, {"Inference-Header-Content-Length": value})
        # Then the answer is a 400 naming the header
        assert response.status_code == 400, response.text
        assert "Inference-Header-Content-Length must be" in response.json()["error"]


def test_bytes_nested_990_deep_and_70_dimensions_are_400(door):
    deep = b"[" * 990 + b'"x"' + b"]" * 990
    body = b'{"inputs":[{"name":"INPUT__0","datatype":"BYTES","shape":[1],"data":' + deep + b"}]}"
    response = _post(door, body)
    assert response.status_code == 400 and "nesting depth exceeds" in response.json()["error"]
    wide = {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1] * 70, "data": [1]}]}
    response = _post(door, json.dumps(wide).encode())
    assert response.status_code == 400 and "70 dimensions" in response.json()["error"]


def test_null_in_fp32_data_is_a_400_naming_the_element(door):
    body = {"inputs": [{**ONE_ROW["inputs"][0], "data": [1, 2, None, 4]}]}
    response = _post(door, json.dumps(body).encode())
    assert response.status_code == 400
    assert "element 2 is null" in response.json()["error"]


def test_a_body_that_stops_arriving_is_cut_off_with_a_408(door):
    host, port = str(door.base_url).removeprefix("http://").rstrip("/").split(":")
    with socket.create_connection((host, int(port)), timeout=20) as raw:
        # Given a client that declares 100 bytes of body and sends 10
        raw.sendall(
            b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n" + b'{"inputs":'
        )
        started = time.monotonic()
        # Then the server answers 408 once the client limit (1 s here) passes
        answer = raw.recv(4096)
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert b"did not arrive within 1 s" in answer
        assert time.monotonic() - started < 15


def test_headers_that_never_finish_close_the_connection(door):
    host, port = str(door.base_url).removeprefix("http://").rstrip("/").split(":")
    with socket.create_connection((host, int(port)), timeout=20) as raw:
        raw.sendall(b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\n")
        started = time.monotonic()
        assert raw.recv(4096) == b""  # closed by the server, not by our 20 s timeout
        assert time.monotonic() - started < 15


DEEP = b"[" * 5000 + b"]" * 5000


@pytest.mark.parametrize(
    ("method", "path", "body", "message"),
    [
        ("PUT", "/models/mlp", b'{"max_batch_size": ' + DEEP + b"}", "nests deeper"),
        ("POST", "/v2/repository/index", b'{"ready": ' + DEEP + b"}", "nests deeper"),
        ("POST", "/v2/repository/models/mlp/load", b'{"parameters": [1]}', '"parameters" must'),
        ("POST", "/v2/repository/models/mlp/load", b'{"parameters": "x"}', '"parameters" must'),
        ("POST", "/v2/repository/models/mlp/load", b'{"parameters": 5}', '"parameters" must'),
        (
            "POST",
            "/v2/repository/models/mlp/load",
            json.dumps({"parameters": {"config": "[" * 5000 + "]" * 5000}}).encode(),
            "parameters.config nests deeper",
        ),
        (
            "POST",
            "/v2/repository/models/mlp/load",
            json.dumps({"parameters": {"config": "{"}}).encode(),
            "parameters.config is not valid JSON",
        ),
    ],
)
def test_management_bodies_are_bounded(stack, method, path, body, message):
    stack.put("models/mlp/1/model.onnx", builders.onnx_mlp(4, 3))
    stack.wait_state("mlp", 1, "READY")
    response = stack.api.request(method, path, content=body)
    assert response.status_code == 400, response.text
    assert message in response.json()["error"]
