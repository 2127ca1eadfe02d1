"""Triton's instance_group count for a tensor model where it serves in a long-running
process: N ONNX Runtime sessions, described as TorchServe's workers, and TorchServe's
scaling call setting the count (it answered "there are no workers" before)."""

from __future__ import annotations

from tests import builders

CONFIG = b"instance_group [{ count: 2 kind: KIND_CPU }]\nmax_batch_size: 8\n"
BODY = {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": [0] * 4}]}


def workers(stack, name: str) -> list[dict]:
    [described] = stack.api.get(f"/models/{name}").json()
    return described.get("workers", [])


def test_an_onnx_models_count_is_its_instances_and_scaling_sets_it(stack):
    # Given an ONNX model whose config asks for two instances, serving
    stack.put("models/mlp/config.pbtxt", CONFIG)
    stack.put("models/mlp/1/model.onnx", builders.onnx_mlp())
    stack.wait_state("mlp", 1, "READY")
    answer = stack.inference.post("/v2/models/mlp/infer", json=BODY)
    assert answer.status_code == 200, answer.text
    # Then describe lists two instances of the one process, and the config is not warned
    assert [w["id"] for w in workers(stack, "mlp")] == ["9000", "9001"]
    [described] = stack.api.get("/models/mlp").json()
    assert not any("instance_group" in w for w in described.get("configWarnings", []))
    # When TorchServe's scaling asks for three, Then there are three, and it still answers
    scaled = stack.api.put("/models/mlp?min_worker=3&synchronous=true")
    assert scaled.status_code == 200, scaled.text
    assert scaled.json()["status"] == "Workers scaled to 3 for model: mlp"
    assert len(workers(stack, "mlp")) == 3
    assert stack.inference.post("/v2/models/mlp/infer", json=BODY).status_code == 200
    # and back down to one
    assert stack.api.put("/models/mlp?min_worker=1&synchronous=true").status_code == 200
    assert len(workers(stack, "mlp")) == 1
