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


def test_data_shorter_or_longer_than_the_shape_is_a_400_in_tritons_words(door):
    """Given add_sub's INT32-less cousin ident, FP32 [-1, 8] (qa/L0_http test.sh sends 15 and
    18 values for a [1, 16] input of "simple")
    When the data holds 7 or 9 values for shape [1, 8]
    Then each is a 400 whose body is exactly Triton's: test.sh greps the whole object."""
    for count, error in (
        (7, "Failed to parse 'data' field: shape does not match true shape"),
        (9, "Unable to parse 'data': Shape does not match true shape of 'data' field"),
    ):
        body = {
            "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 8], "data": [1.0] * count}]
        }
        answer = door.post("/v2/models/ident/infer", json=body)
        assert answer.status_code == 400, answer.text
        assert answer.content == json.dumps({"error": error}, separators=(",", ":")).encode()


def test_negative_dimensions_are_a_400(door):
    """Given a shape with a negative dimension (qa/L0_http test_negative_dimensions)
    When it is sent
    Then it is a 400 naming the shape (Triton answers 500)."""
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, -5], "data": [1.0]}]}
    answer = door.post("/v2/models/ident/infer", json=body)
    assert answer.status_code == 400, answer.text
    assert "shape" in answer.json()["error"]


def _add_sub(door, **fields: Any) -> tuple[dict[str, Any], bytes]:
    """add_sub on 1..4 and ones, as test.sh sends "simple" its two inputs; the answer's
    JSON header and the binary data after it."""
    a, b = np.arange(1, 5, dtype=np.float32), np.ones(4, np.float32)
    body = {
        "inputs": [
            {"name": "a", "datatype": "FP32", "shape": [1, 4], "data": a.tolist()},
            {"name": "b", "datatype": "FP32", "shape": [1, 4], "data": b.tolist()},
        ],
        **fields,
    }
    answer = door.post("/v2/models/add_sub/infer", json=body)
    assert answer.status_code == 200, answer.text
    length = int(answer.headers.get("Inference-Header-Content-Length", len(answer.content)))
    return json.loads(answer.content[:length]), answer.content[length:]


def test_binary_data_output_with_no_outputs_named_answers_every_output_binary(door):
    """Given binary_data_output: true and no outputs named (test.sh's first case)
    When add_sub answers
    Then both outputs are binary and neither's values are in the JSON."""
    header, blobs = _add_sub(door, parameters={"binary_data_output": True})
    outputs = {o["name"]: o for o in header["outputs"]}
    assert all("data" not in o for o in outputs.values()), header
    assert [o["parameters"]["binary_data_size"] for o in header["outputs"]] == [16, 16]
    sums = np.arange(1, 5, dtype=np.float32) + 1
    assert np.frombuffer(blobs, np.float32).tolist() in (
        [*sums, *(sums - 2)],
        [*(sums - 2), *sums],
    )


def test_binary_data_output_applies_to_no_output_the_request_names(door):
    """Given binary_data_output: true, output sum with binary_data: false and diff named
    without binary_data (test.sh's second case: both values found in the JSON)
    When add_sub answers
    Then both outputs are JSON: a named output is binary only where it asks, as Triton
    answers (binary_data_output is for the outputs a request does not name)."""
    header, blobs = _add_sub(
        door,
        outputs=[{"name": "sum", "parameters": {"binary_data": False}}, {"name": "diff"}],
        parameters={"binary_data_output": True},
    )
    outputs = {o["name"]: o for o in header["outputs"]}
    assert outputs["sum"]["data"] == [2.0, 3.0, 4.0, 5.0]
    assert outputs["diff"]["data"] == [0.0, 1.0, 2.0, 3.0]
    assert blobs == b""


def test_one_output_binary_and_one_not_named_binary(door):
    """Given sum with binary_data: true and diff named without it (test.sh's last case)
    When add_sub answers
    Then sum is binary and diff JSON."""
    header, blobs = _add_sub(
        door, outputs=[{"name": "sum", "parameters": {"binary_data": True}}, {"name": "diff"}]
    )
    outputs = {o["name"]: o for o in header["outputs"]}
    assert "data" not in outputs["sum"] and outputs["diff"]["data"] == [0.0, 1.0, 2.0, 3.0]
    assert np.frombuffer(blobs, np.float32).tolist() == [2.0, 3.0, 4.0, 5.0]


def _send(door: httpx.Client, head: bytes, body: bytes) -> tuple[int, dict[str, str], bytes]:
    """One request written on the socket as given; its status, headers (lower-case) and body
    (de-chunked)."""
    address = urlsplit(str(door.base_url))
    host = f"Host: {address.hostname}:{address.port}\r\n".encode()
    with socket.create_connection((address.hostname, address.port), timeout=60) as sock:
        sock.sendall(head.replace(b"\r\n", b"\r\n" + host, 1) + body)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    status_line, _, rest = received.partition(b"\r\n")
    lines, _, answer = rest.partition(b"\r\n\r\n")
    headers = {
        name.strip().lower(): value.strip()
        for name, _, value in (
            line.partition(":") for line in lines.decode("latin-1").split("\r\n")
        )
    }
    if headers.get("transfer-encoding") == "chunked":
        answer = _dechunk(answer)
    return int(status_line.split()[1]), headers, answer


_FLOATS = np.arange(8, dtype=np.float32).tobytes()
# test_content_encoding_chunked_manually's body: one chunk, then the last
_CHUNKED = f"{len(_FLOATS):X}\r\n".encode() + _FLOATS + b"\r\n0\r\n\r\n"


@pytest.mark.parametrize("content_length", [False, True], ids=["alone", "as-requests-sends-it"])
def test_a_body_chunked_by_hand_is_answered(door, content_length):
    """Given a raw binary request (Inference-Header-Content-Length: 0) chunk-encoded by the
    caller with Transfer-Encoding: chunked, as qa/L0_http's
    test_content_encoding_chunked_manually sends it through requests (which adds the
    Content-Length of the encoded body beside it)
    When it reaches the server
    Then the identity model answers its 8 floats, as Triton does."""
    head = (
        b"POST /v2/models/ident/infer HTTP/1.1\r\n"
        b"Inference-Header-Content-Length: 0\r\nTransfer-Encoding: chunked\r\n"
        + (f"Content-Length: {len(_CHUNKED)}\r\n".encode() if content_length else b"")
        + b"Connection: close\r\n\r\n"
    )
    status, headers, body = _send(door, head, _CHUNKED)
    assert status == 200, body[:500]
    assert body[int(headers["inference-header-content-length"]) :] == _FLOATS


def test_content_encoding_chunked_is_refused_as_triton_refuses_it(door):
    """Given the same raw request with chunked named as its Content-Encoding
    When it reaches the server
    Then it is refused as Triton refuses it: 501 "Unsupported compression type", with
    Accept-Encoding naming the encodings that are read."""
    head = (
        b"POST /v2/models/ident/infer HTTP/1.1\r\n"
        b"Inference-Header-Content-Length: 0\r\nContent-Encoding: chunked\r\n"
        + f"Content-Length: {len(_CHUNKED)}\r\n".encode()
        + b"Connection: close\r\n\r\n"
    )
    status, headers, body = _send(door, head, _CHUNKED)
    assert status == 501, body[:500]
    assert json.loads(body)["error"].startswith("Unsupported compression type")
    assert headers["accept-encoding"] == "gzip, deflate"


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
