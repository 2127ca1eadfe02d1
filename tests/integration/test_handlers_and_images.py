"""Code around the model with real payloads: TorchServe handlers (function and class form)
called as TorchServe documents it (curl -T, raw bodies, multipart), and JPEG in -> labels out
through an ensemble with Triton's classification extension, each checked against the same
steps run by hand."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as triton
from PIL import Image

from tests import builders
from tests.integration.test_python_models import publish

CNN = builders.onnx_cnn(seed=3)
LABELS = ["tabby", "tiger cat", "coffee mug", "espresso"]


def jpeg(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 255, (24, 24, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG")
    return buffer.getvalue()


def logits_by_hand(image: bytes) -> np.ndarray:
    decoded = Image.open(io.BytesIO(image)).convert("RGB").resize((8, 8))
    chw = (np.asarray(decoded, dtype=np.float32) / 255.0).transpose(2, 0, 1)
    session = ort.InferenceSession(CNN)
    return session.run(None, {"image": chw[np.newaxis]})[0][0]


def top3_by_hand(image: bytes) -> dict[str, float]:
    logits = logits_by_hand(image)
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    return {LABELS[i]: float(probs[i]) for i in np.argsort(-probs)[:3]}


def curl(*args: str) -> tuple[int, bytes, str]:
    """curl as TorchServe's documentation calls it; returns status, body, content type."""
    done = subprocess.run(
        ["curl", "-s", "-o", "-", "-w", "\n%{http_code} %{content_type}", *args],
        capture_output=True,
        check=True,
        timeout=60,
    )
    body, _, trailer = done.stdout.rpartition(b"\n")
    status, _, content_type = trailer.decode().partition(" ")
    return int(status), body, content_type


@pytest.fixture
def url(stack) -> str:
    return str(stack.inference.base_url).rstrip("/")


def test_a_function_handler_gets_torchserve_rows(stack, url, tmp_path: Path):
    # Given a handler without a config (module-level handle(data, context))
    publish(stack, "echo_handler")
    stack.wait_state("echo_handler", 1, "READY")
    payload = tmp_path / "payload.bin"
    payload.write_bytes(b"\x00\x01raw bytes")
    # When it is called with curl -T (PUT), a raw POST body, JSON and multipart fields
    status, body, _ = curl("-T", str(payload), f"{url}/predictions/echo_handler")
    assert status == 200
    assert json.loads(body)["sizes"] == {"body": 11}
    raw = stack.inference.post(
        "/predictions/echo_handler",
        content=b"abc",
        headers={"content-type": "application/octet-stream", "user-agent": "probe/1"},
    )
    assert raw.json() == {
        "model": "echo_handler",
        "fields": ["body"],
        "sizes": {"body": 3},
        "agent": "probe/1",
    }
    as_json = stack.inference.post("/predictions/echo_handler", json={"x": 1})
    assert as_json.json()["sizes"] == {"body": {"x": 1}}  # JSON bodies arrive parsed
    status, body, _ = curl(
        f"{url}/predictions/echo_handler", "-F", f"data=@{payload}", "-F", "note=hello"
    )
    assert (status, json.loads(body)["sizes"]) == (200, {"data": 11, "note": 5})
    # Then bytes come back as bytes, with the content type the handler set
    status, body, content_type = curl(f"{url}/predictions/echo_handler", "-F", "bytes=abc")
    assert (status, body, content_type) == (200, b"cba", "application/x-echo")


def test_a_handler_answers_v2_infer_too_one_row_per_element(stack):
    publish(stack, "echo_handler")
    stack.wait_state("echo_handler", 1, "READY")
    url = str(stack.inference.base_url).removeprefix("http://").rstrip("/")
    with triton.InferenceServerClient(url) as client:
        data = triton.InferInput("data", [2], "BYTES")
        data.set_data_from_numpy(np.array([b"ab", b"cdef"], dtype=object))
        result = client.infer("echo_handler", [data])
    answers = [json.loads(a) for a in result.as_numpy("output")]
    assert [a["sizes"] for a in answers] == [{"body": 2}, {"body": 4}]
    assert result.as_numpy("content_type").tolist() == [b"application/json"] * 2


def test_a_class_handler_classifies_a_jpeg_as_by_hand(stack, url, tmp_path: Path):
    # Given TorchServe's image classifier shape: a class handler, its model, its label map
    publish(stack, "tiny_densenet")
    stack.put("models/tiny_densenet/1/model.onnx", CNN)
    stack.wait_state("tiny_densenet", 1, "READY")
    image = jpeg(seed=7)
    kitten = tmp_path / "kitten.jpg"
    kitten.write_bytes(image)
    expected = top3_by_hand(image)
    # When the JPEG is sent with curl -T, as a raw body and as a multipart field
    answers = [
        curl(f"{url}/predictions/tiny_densenet", "-T", str(kitten)),
        curl(f"{url}/predictions/tiny_densenet/1", "--data-binary", f"@{kitten}"),
        curl(f"{url}/predictions/tiny_densenet", "-F", f"data=@{kitten}"),
    ]
    # Then each answer is the top 3 labels the steps give when run by hand
    for status, body, content_type in answers:
        assert (status, content_type) == (200, "application/json")
        got = json.loads(body)
        assert list(got) == list(expected)
        assert np.allclose(list(got.values()), list(expected.values()), atol=1e-6)


def test_jpeg_to_labels_through_an_ensemble_with_classification(stack, url, tmp_path: Path):
    # Given Python preprocessing -> ONNX CNN as an ensemble whose output has a label file
    for name in ("jpeg_pre", "image_classifier"):
        publish(stack, name)
    stack.put("models/cnn/1/model.onnx", CNN)
    stack.wait_state("image_classifier", 1, "READY")
    images = [jpeg(seed) for seed in (1, 2)]
    # When Triton's image client flow asks for the top 3 classes of a batch of two
    host = url.removeprefix("http://")
    with triton.InferenceServerClient(host) as client:
        tensor = triton.InferInput("IMAGE", [2, 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[i] for i in images], dtype=object))
        wanted = triton.InferRequestedOutput("SCORES", class_count=3)
        result = client.infer("image_classifier", [tensor], outputs=[wanted])
    # Then each row is "score:index:label", highest first, as the steps give by hand
    rows = result.as_numpy("SCORES")
    assert rows.shape == (2, 3)
    for image, row in zip(images, rows, strict=True):
        logits = logits_by_hand(image)
        order = np.argsort(-logits, kind="stable")[:3]
        parsed = [entry.decode().split(":") for entry in row]
        assert [int(p[1]) for p in parsed] == order.tolist()
        assert [p[2] for p in parsed] == [LABELS[i] for i in order]
        assert np.allclose([float(p[0]) for p in parsed], logits[order], atol=1e-5)
    # And the same JPEG sent as TorchServe users send it reaches the BYTES input
    kitten = tmp_path / "kitten.jpg"
    kitten.write_bytes(images[0])
    status, body, _ = curl(f"{url}/predictions/image_classifier", "-T", str(kitten))
    assert status == 200
    assert np.allclose(json.loads(body), logits_by_hand(images[0]), atol=1e-5)


def test_raw_bytes_to_a_tensor_model_say_what_it_takes(stack):
    stack.put("models/cnn/1/model.onnx", CNN)
    stack.wait_state("cnn", 1, "READY")
    response = stack.inference.put(
        "/predictions/cnn", content=jpeg(1), headers={"content-type": "image/jpeg"}
    )
    assert response.status_code == 400
    assert "takes tensors ['image']" in response.json()["error"]
    multipart = stack.inference.post("/predictions/cnn", files={"data": ("k.jpg", jpeg(1))})
    assert multipart.status_code == 400


@pytest.mark.parametrize(
    ("source", "why"),
    [
        (b"class NotAHandler:\n    pass\n", "no class has handle"),
        (b"def other(data, context):\n    return data\n", "defines neither handle"),
        (b"def handle(data, context)\n", "handler.py line 1"),
    ],
)
def test_handlers_are_checked_at_publish(stack, source, why):
    stack.put("models/bad_handler/1/handler.py", source)
    state = stack.wait_state("bad_handler", 1, "UNAVAILABLE")
    assert why in state


def test_a_missing_label_file_is_a_config_error_naming_it(stack):
    config = b'max_batch_size: 8 output [{ name: "logits" data_type: TYPE_FP32 dims: [ 4 ] '
    stack.put("models/nolabels/config.pbtxt", config + b'label_filename: "labels.txt" }]')
    stack.put("models/nolabels/1/model.onnx", CNN)
    reason = stack.wait_state("nolabels", 1, "UNAVAILABLE")
    assert "label_filename 'labels.txt', which is missing" in reason
