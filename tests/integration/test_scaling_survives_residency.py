"""Scaling that residency keeps: a handler scaled with TorchServe's min_worker stays loaded
with its workers while other models load past the residency bound; if residency must drop
it anyway (everything left is scaled), the log says so and its next load restores the
scale."""

from __future__ import annotations

import logging

import pytest

from tests import builders
from tests.support import wait_until

HANDLER = """
def handle(data, context):
    if data is None:
        return None
    return [bytes(row.get("body", row.get("data"))).decode().upper() for row in data]
"""
WAIT_S = 120


@pytest.fixture
def two_resident(monkeypatch):
    monkeypatch.setenv("LAMBDASERVE_MAX_LOADED_VERSIONS", "2")


def publish_handler(stack, name: str) -> None:
    stack.put(f"models/{name}/1/handler.py", HANDLER.encode())
    stack.wait_state(name, 1, "READY", timeout_s=WAIT_S)


def scale(stack, name: str, workers: int) -> set[int]:
    scaled = stack.api.put(f"/models/{name}?min_worker={workers}&synchronous=true")
    assert scaled.status_code == 200, scaled.text
    assert scaled.json()["status"] == f"Workers scaled to {workers} for model: {name}"
    return pids(stack, name)


def pids(stack, name: str) -> set[int]:
    [described] = stack.api.get(f"/models/{name}").json()
    return {w["pid"] for w in described["workers"]}


def load_onnx(stack, name: str) -> None:
    stack.put(f"models/{name}/1/model.onnx", builders.onnx_mlp())
    stack.wait_state(name, 1, "READY")
    body = {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": [0] * 4}]}
    answer = stack.inference.post(f"/v2/models/{name}/infer", json=body)
    assert answer.status_code == 200, answer.text


def test_a_scaled_handler_keeps_its_workers_while_other_models_come_and_go(
    two_resident, stack, caplog
):
    """Given residency of two versions and a handler scaled to two workers,
    When three other models load one after another,
    Then the handler keeps its two worker processes (the others take turns);
    and when a second scaled handler leaves nothing unscaled to drop, the least recently
    used scaled one is dropped with a warning, and its next load has two workers again."""
    publish_handler(stack, "upper")
    workers = scale(stack, "upper", 2)
    assert len(workers) == 2
    for name in ("m1", "m2", "m3"):
        load_onnx(stack, name)
        assert pids(stack, "upper") == workers
    assert stack.inference.post("/predictions/upper", content=b"hi").text == "HI"

    publish_handler(stack, "lower")
    assert len(scale(stack, "lower", 2)) == 2
    caplog.set_level(logging.WARNING, logger="lambdaserve.serving")
    load_onnx(stack, "m4")
    warned = [r.getMessage() for r in caplog.records if "although it was scaled" in r.getMessage()]
    assert warned and warned[0].startswith("unloading upper version 1"), warned
    [described] = stack.api.get("/models/upper").json()
    assert described["workers"] == [] and described["minWorkers"] == 2
    assert "its next load starts 2 worker(s) again" in described["residency"]
    assert stack.inference.post("/predictions/upper", content=b"again").text == "AGAIN"
    wait_until(lambda: len(pids(stack, "upper")) == 2, WAIT_S)  # restored (workers start)
