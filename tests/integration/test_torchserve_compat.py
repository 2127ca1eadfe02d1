"""TorchServe's small habits, as its users and clients meet them: set-default answers the
archive's version string, errors come in TorchServe's ErrorResponse shape, describe carries
``jobQueueStatus`` and a filled ``runtime``/``engine``, ``/api-description`` answers on both
APIs, registering an archive by file name says to upload that archive, and a binary body
sent to a tensor model is told what the model takes."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from lambdaserve.local.emulator import free_port
from lambdaserve.processes.background import BackgroundServer
from lambdaserve.processes.serve import build_serving_app
from tests import builders
from tests.integration.test_torchserve_archives import aws_s3_cp, wait_published
from tests.torchserve_archives import archive

pytest.importorskip("ts")
pytestmark = pytest.mark.torch


def test_set_default_answers_the_archive_version_string(stack, tmp_path: Path):
    """Given tiny.mar 1.0 and 2.0 published
    When TorchServe's set-default names 1.0
    Then the answer says "1.0", as TorchServe's does, and describe lists TorchServe's fields."""
    aws_s3_cp(stack, archive(tmp_path, "tiny", "1.0"), "models/tiny.mar")
    wait_published(stack, "tiny", 1, "1.0")
    aws_s3_cp(stack, archive(tmp_path, "tiny", "2.0"), "models/tiny.mar")
    wait_published(stack, "tiny", 2, "2.0")
    answer = stack.api.put("/models/tiny/1.0/set-default")
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == (
        'Default version successfully updated for model "tiny" to "1.0"'
    )
    [entry] = stack.api.get("/models/tiny/1.0").json()
    assert entry["jobQueueStatus"] == {"remainingCapacity": 100, "pendingRequests": 0}
    assert entry["runtime"] and entry["engine"], entry


def test_errors_on_torchserves_doors_are_its_error_response(stack):
    """Given no model "nope"
    When TorchServe's inference and management calls name it
    Then each answers TorchServe's ErrorResponse (code, type, message), and Triton's routes
    keep their {"error"} body."""
    for response in (
        stack.api.get("/models/nope"),
        stack.inference.post("/predictions/nope", content=b"[1]"),
    ):
        assert response.status_code == 404, response.text
        body = response.json()
        assert body["code"] == 404
        assert body["type"] == "ModelNotFoundException"
        assert "nope" in body["message"]
    triton = stack.inference.get("/v2/models/nope")
    assert triton.status_code == 404 and set(triton.json()) == {"error"}


def test_api_description_answers_on_both_apis(stack):
    """Given the inference and management APIs
    When TorchServe's GET /api-description is called on each
    Then each answers its OpenAPI document."""
    for client in (stack.inference, stack.api):
        answer = client.get("/api-description")
        assert answer.status_code == 200, answer.text
        assert "openapi" in answer.json() and answer.json()["paths"]


def test_registering_an_archive_by_name_says_to_upload_that_archive(stack):
    """Given a bucket without tiny.mar
    When TorchServe's register names it (its model-store habit)
    Then the 400 says to upload tiny.mar, not a model.onnx."""
    answer = stack.api.post("/models", params={"url": "tiny.mar"})
    assert answer.status_code == 400
    message = answer.json()["message"]
    assert "aws s3 cp tiny.mar s3://<ModelBucketName>/models/tiny.mar" in message
    assert "model.onnx" not in message


def test_a_binary_body_to_a_tensor_model_is_told_what_it_takes(stack):
    """Given an ONNX model with one FP32 input
    When an image's bytes are posted to /predictions as curl --data-binary sends them
    Then the 400 says the body is binary and names the input the model takes."""
    stack.put("models/mlp/1/model.onnx", builders.onnx_mlp(4, 3))
    stack.wait_state("mlp", 1, "READY")
    answer = stack.inference.post(
        "/predictions/mlp",
        content=b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\xff\xfe",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert answer.status_code == 400, answer.text
    message = answer.json()["message"]
    assert "binary" in message and "INPUT__0" in message and "FP32" in message, message
    assert "UTF-8" not in message


def test_serves_front_door_answers_torchserves_error_response_too(stack):
    """Given `lambdaserve serve`'s app, whose front door answers /predictions itself
    When a prediction names an unknown model
    Then the 404 is TorchServe's ErrorResponse, as on `lambdaserve dev`."""
    server = BackgroundServer(build_serving_app(batching=True), "127.0.0.1", free_port()).start()
    try:
        answer = httpx.post(f"{server.url}/predictions/nope", content=b"[1]", timeout=60)
    finally:
        server.stop()
    assert answer.status_code == 404, answer.text
    assert answer.json()["type"] == "ModelNotFoundException"
    assert answer.json()["code"] == 404 and "nope" in answer.json()["message"]
