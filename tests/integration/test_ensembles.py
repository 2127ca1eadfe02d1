"""Ensembles as Triton's config gives them: Python preprocessing -> ONNX -> Python
postprocessing, with a parallel branch, called with tritonclient; validated against the
catalog in any order of uploads; a retired step makes the ensemble say so."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as triton

from tests import builders
from tests.support import wait_until

MODELS = Path(__file__).parent.parent / "fixtures" / "python_models"
MLP = builders.onnx_mlp(4, 3)
STEPS = ("scale", "double", "softmax")


def publish(stack, name: str) -> None:
    for file in sorted((MODELS / name).rglob("*")):
        if file.is_file():
            relative = file.relative_to(MODELS / name).as_posix()
            stack.put(f"models/{name}/{relative}", file.read_bytes())


def expected(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    logits = ort.InferenceSession(MLP).run(None, {"INPUT__0": raw / 10})[0]
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True), raw / 10 * 2


@pytest.fixture
def client(stack):
    url = str(stack.inference.base_url).removeprefix("http://").rstrip("/")
    with triton.InferenceServerClient(url) as tc:
        yield tc


def test_a_three_step_pipeline_with_a_parallel_branch(stack, client):
    # Given the step models and an ensemble config with no version directory at all
    stack.put("models/mlp/1/model.onnx", MLP)
    for step in STEPS:
        publish(stack, step)
    publish(stack, "pipe")
    for model in ("mlp", *STEPS):
        stack.wait_state(model, 1, "READY")
    # Then its config alone serves as version 1
    stack.wait_state("pipe", 1, "READY")
    raw = np.random.default_rng(0).random((2, 4), dtype=np.float32) * 10
    tensor = triton.InferInput("RAW", [2, 4], "FP32")
    tensor.set_data_from_numpy(raw)
    result = client.infer("pipe", [tensor])
    probs, doubled = expected(raw)
    np.testing.assert_allclose(result.as_numpy("PROBS"), probs, rtol=1e-5)
    np.testing.assert_allclose(result.as_numpy("DOUBLED"), doubled, rtol=1e-6)
    # And every step's statistics count the call, as the ensemble's own do
    for model in ("pipe", "mlp", *STEPS):
        [stats] = client.get_inference_statistics(model)["model_stats"]
        assert stats["inference_stats"]["success"]["count"] >= 1, model


def test_an_ensemble_published_before_its_steps_becomes_ready_when_they_do(stack, client):
    publish(stack, "pipe")
    reason = stack.wait_state("pipe", 1, "UNAVAILABLE")
    assert "ensemble step" in reason and "is not in the catalog" in reason
    stack.put("models/mlp/1/model.onnx", MLP)
    for step in STEPS:
        publish(stack, step)
    stack.wait_state("pipe", 1, "READY", timeout_s=40)


def test_a_retired_step_makes_the_ensemble_say_so(stack, client):
    stack.put("models/mlp/1/model.onnx", MLP)
    for step in STEPS:
        publish(stack, step)
    publish(stack, "pipe")
    stack.wait_state("pipe", 1, "READY", timeout_s=40)
    stack.delete("models/double/1/model.py")
    reason = stack.wait_state("pipe", 1, "UNAVAILABLE", timeout_s=40)
    assert "ensemble step 2 ('double')" in reason
    response = stack.inference.get("/v2/models/pipe/ready")
    assert response.status_code == 503
    wait_until(lambda: "double" in stack.inference.get("/v2/models/pipe/ready").json()["error"])
