"""Triton's own qa/L0_http cases (http_test.py), over real HTTP through both doors (the app
`lambdaserve dev` serves and `lambdaserve serve`'s front door + batcher) and the management
API: the answers Triton's tests expect, or a 4xx saying what is wrong where Triton's
answer is a 500 (docs/compatibility.md)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import numpy as np
import pytest

from lambdaserve.local.emulator import free_port
from lambdaserve.processes.background import BackgroundServer
from lambdaserve.processes.serve import build_serving_app
from tests import builders


@pytest.fixture(params=["app", "serve"])
def door(stack, request) -> Iterator[httpx.Client]:
    """The inference API as dev serves it, or as `lambdaserve serve` does."""
    stack.put("models/ident/1/model.onnx", builders.onnx_identity(8))
    stack.put("models/strs/1/model.onnx", builders.onnx_string_identity())
    stack.put("models/add_sub/1/model.onnx", builders.onnx_add_sub())
    for model in ("ident", "strs", "add_sub"):
        stack.wait_state(model, 1, "READY")
    if request.param == "serve":
        app = build_serving_app(batching=True)
    else:
        app = stack.process.inference_app
    server = BackgroundServer(app, "127.0.0.1", free_port()).start()
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            yield client
    finally:
        server.stop()


def _nested(depth: int, value: Any) -> Any:
    for _ in range(depth):
        value = [value]
    return value


def test_json_nesting_50_deep_is_answered_and_120_deep_is_a_400(door):
    """Given BYTES and FP32 data nested 50 and 120 lists deep (qa/L0_http's recursion test)
    When each is sent for a [1, 1] input
    Then 50 deep answers and 120 deep is a 400 naming the depth limit."""
    for model, datatype, value in (("strs", "BYTES", "hello"), ("ident", "FP32", 1)):
        shape = [1] if datatype == "BYTES" else [1, 8]
        data = [value] if datatype == "BYTES" else [value] * 8
        for depth, ok in ((50, True), (120, False)):
            nested = _nested(depth, data)
            body = {"inputs": [{"name": "x", "datatype": datatype, "shape": shape, "data": nested}]}
            answer = door.post(f"/v2/models/{model}/infer", json=body)
            if ok:
                assert answer.status_code == 200, (model, depth, answer.text)
            else:
                assert answer.status_code == 400, (model, depth, answer.text)
                assert (
                    "JSON nesting depth exceeds maximum allowed limit (100)"
                    in answer.json()["error"]
                ), answer.text


def test_data_shorter_or_longer_than_the_shape_is_a_400(door):
    """Given an FP32 [-1, 8] input
    When the data holds 7 or 9 values for shape [1, 8]
    Then each is a 400 saying how many values the shape takes."""
    for count in (7, 9):
        body = {
            "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 8], "data": [1.0] * count}]
        }
        answer = door.post("/v2/models/ident/infer", json=body)
        assert answer.status_code == 400, answer.text
        assert "8" in answer.json()["error"] and str(count) in answer.json()["error"]


def test_negative_dimensions_are_a_400(door):
    """Given a shape with a negative dimension (qa/L0_http test_negative_dimensions)
    When it is sent
    Then it is a 400 naming the shape (Triton answers 500)."""
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, -5], "data": [1.0]}]}
    answer = door.post("/v2/models/ident/infer", json=body)
    assert answer.status_code == 400, answer.text
    assert "shape" in answer.json()["error"]


def test_binary_data_output_with_one_output_json(door):
    """Given binary_data_output: true and one output asking binary_data: false
    When add_sub answers
    Then that output is JSON and the other binary, as Triton answers."""
    a, b = np.arange(4, dtype=np.float32), np.ones(4, np.float32)
    body = {
        "inputs": [
            {"name": "a", "datatype": "FP32", "shape": [1, 4], "data": a.tolist()},
            {"name": "b", "datatype": "FP32", "shape": [1, 4], "data": b.tolist()},
        ],
        "outputs": [{"name": "sum", "parameters": {"binary_data": False}}, {"name": "diff"}],
        "parameters": {"binary_data_output": True},
    }
    answer = door.post("/v2/models/add_sub/infer", json=body)
    assert answer.status_code == 200, answer.text
    length = int(answer.headers["Inference-Header-Content-Length"])
    header = json.loads(answer.content[:length])
    outputs = {o["name"]: o for o in header["outputs"]}
    assert outputs["sum"]["data"] == (a + b).tolist()
    assert "binary_data_size" not in outputs["sum"].get("parameters", {})
    assert outputs["diff"]["parameters"]["binary_data_size"] == 16
    assert np.frombuffer(answer.content[length:], np.float32).tolist() == (a - b).tolist()


def test_a_body_chunked_by_hand_is_answered(door):
    """Given a raw binary request (Inference-Header-Content-Length: 0) chunk-encoded by the
    caller, as qa/L0_http's test_content_encoding_chunked_manually sends it
    When it reaches the server
    Then the identity model answers its 8 floats."""
    values = np.arange(8, dtype=np.float32).tobytes()
    chunked = f"{len(values):X}\r\n".encode() + values + b"\r\n0\r\n\r\n"
    address = urlsplit(str(door.base_url))
    request = (
        b"POST /v2/models/ident/infer HTTP/1.1\r\n"
        + f"Host: {address.hostname}\r\n".encode()
        + b"Inference-Header-Content-Length: 0\r\n"
        b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + chunked
    )
    with socket.create_connection((address.hostname, address.port), timeout=60) as sock:
        sock.sendall(request)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), received[:500]
    headers = dict(
        line.split(": ", 1) for line in head.decode("latin-1").split("\r\n")[1:] if ": " in line
    )
    headers = {k.lower(): v for k, v in headers.items()}
    if headers.get("transfer-encoding") == "chunked":
        body = _dechunk(body)
    length = int(headers["inference-header-content-length"])
    assert body[length:] == values


def _dechunk(body: bytes) -> bytes:
    out, rest = b"", body
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        out, rest = out + rest[:size], rest[size + 2 :]
    return out


def test_an_oversized_file_parameter_on_load_is_a_400_and_the_server_stays_up(stack):
    """Given a load whose file parameter's path is 256 characters (qa/L0_http)
    When it reaches the management API
    Then it is a 400 saying what is refused, and the server still answers."""
    stack.put("models/ident/1/model.onnx", builders.onnx_identity(8))
    stack.wait_state("ident", 1, "READY")
    body = {"parameters": {"file:" + "A" * 256: "YQ==", "config": "{}"}}
    answer = stack.api.post("/v2/repository/models/ident/load", json=body)
    assert answer.status_code in (400, 413), answer.text
    assert "file" in answer.json()["error"] and "upload" in answer.json()["error"]
    assert stack.api.post("/v2/repository/index", json={}).status_code == 200


def test_a_deeply_nested_repository_index_body_is_a_400(stack):
    """Given a repository-index body whose "ready" is 250000 lists deep (qa/L0_http)
    When it reaches the management API
    Then it is a 400 saying the body nests too deep, and the server still answers."""
    depth = 250_000
    payload = '{"ready":' + "[" * depth + "true" + "]" * depth + "}"
    answer = stack.api.post(
        "/v2/repository/index", content=payload, headers={"Content-Type": "application/json"}
    )
    assert answer.status_code == 400, answer.text[:500]
    assert "nests deeper" in answer.json()["error"], answer.text[:500]
    assert stack.api.post("/v2/repository/index", json={}).status_code == 200
