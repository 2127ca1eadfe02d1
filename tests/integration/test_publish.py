"""Publish by upload: S3 events -> SQS -> manage handler -> catalog, seen over HTTP."""

from __future__ import annotations

import logging
import re

import pytest

from tests import builders
from tests.support import wait_until


def test_an_uploaded_onnx_model_becomes_ready_with_its_signature(stack):
    # Given an empty repository / When a model is uploaded
    stack.put("models/resnet/1/model.onnx", builders.onnx_mlp(4, 3))
    # Then the repository index shows it READY
    stack.wait_state("resnet", 1, "READY")
    # And the management API describes it with signature, digest, size and timestamps
    [entry] = stack.api.get("/models/resnet").json()
    assert entry["modelName"] == "resnet"
    assert entry["modelVersion"] == "1"
    assert entry["state"] == "READY"
    assert entry["isDefault"] is True
    assert entry["runtime"] == "onnxruntime"
    assert entry["signature"] == {
        "inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [-1, 4]}],
        "outputs": [{"name": "OUTPUT__0", "datatype": "FP32", "shape": [-1, 3]}],
    }
    assert re.fullmatch(r"[0-9a-f]{64}", entry["sha256"])
    assert entry["size"] == len(builders.onnx_mlp(4, 3))
    assert entry["createdAt"].endswith("Z") and entry["validatedAt"]
    assert entry["modelUrl"] == f"s3://{stack.settings.bucket}/models/resnet/1/"


def test_overwriting_a_version_revalidates_it(stack):
    stack.put("models/m/1/model.onnx", builders.onnx_mlp(4, 3))
    stack.wait_state("m", 1, "READY")
    stack.put("models/m/1/model.onnx", builders.onnx_mlp(6, 2))

    def signature_updated():
        [entry] = stack.api.get("/models/m/1").json()
        # While it revalidates the version is LOADING, with no signature yet
        inputs = entry["signature"].get("inputs") or [{}]
        return entry["state"] == "READY" and inputs[0].get("shape") == [-1, 6]

    wait_until(signature_updated)


def test_delete_retires_a_version_and_republishing_restores_it(stack):
    stack.put("models/m/1/model.onnx", builders.onnx_mlp())
    stack.wait_state("m", 1, "READY")
    stack.delete("models/m/1/model.onnx")
    assert stack.wait_state("m", 1, "UNAVAILABLE").startswith("removed")
    stack.put("models/m/1/model.onnx", builders.onnx_mlp())
    stack.wait_state("m", 1, "READY")


def test_a_broken_newer_version_does_not_take_the_served_one_away(stack):
    # Given version 1 serving under the default policy (latest 1)
    stack.put("models/m/1/model.onnx", builders.onnx_mlp())
    stack.wait_state("m", 1, "READY")
    # When a newer version with non-model bytes arrives
    stack.put("models/m/2/model.onnx", b"this is not an onnx file" * 4)
    # Then it is UNAVAILABLE with a reason a person can act on, and version 1 keeps serving
    reason = stack.wait_state("m", 2, "UNAVAILABLE")
    assert "not an ONNX model" in reason or "cannot load" in reason
    assert stack.state("m", 1) == ("READY", "")


def test_pickled_pt_is_rejected_with_the_fix(stack):
    stack.put("models/p/1/model.pt", builders.plain_pickle())
    assert "torch.jit" in stack.wait_state("p", 1, "UNAVAILABLE")


def test_a_config_arriving_after_the_versions_applies_its_policy(stack):
    for version in (1, 2, 3):
        stack.put(f"models/m/{version}/model.onnx", builders.onnx_mlp(seed=version))
    stack.wait_state("m", 3, "READY")
    assert stack.state("m", 1) == ("UNAVAILABLE", "not selected by the version policy (latest 1)")
    stack.put("models/m/config.pbtxt", b"version_policy: { all { } }")
    for version in (1, 2, 3):
        stack.wait_state("m", version, "READY")
    # When the config goes away again, the default policy (latest 1) returns
    stack.delete("models/m/config.pbtxt")
    stack.wait_state("m", 1, "UNAVAILABLE")
    assert stack.state("m", 3) == ("READY", "")


def test_a_config_arriving_before_the_versions_is_used(stack):
    stack.put("models/m/config.json", b'{"version_policy": {"specific": {"versions": [1]}}}')
    stack.put("models/m/1/model.onnx", builders.onnx_mlp())
    stack.put("models/m/2/model.onnx", builders.onnx_mlp())
    stack.wait_state("m", 1, "READY")
    stack.wait_state("m", 2, "UNAVAILABLE")


def test_an_invalid_config_over_a_serving_model_keeps_it_serving_and_says_why(stack):
    stack.put("models/m/1/model.onnx", builders.onnx_mlp())
    stack.wait_state("m", 1, "READY")
    # When a config with a syntax error is uploaded over the serving model
    stack.put("models/m/config.pbtxt", b"max_batch_size: [")
    # Then the version keeps serving, with the parse error beside READY (index and API)
    wait_until(lambda: "config.pbtxt is not valid" in stack.state("m", 1)[1], 20)
    assert stack.state("m", 1)[0] == "READY"
    [entry] = stack.api.get("/models/m/1").json()
    assert "config.pbtxt is not valid" in entry["configRejected"]
    body = {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": [1] * 4}]}
    assert stack.inference.post("/v2/models/m/infer", json=body).status_code == 200
    # And a fixed config clears the note
    stack.put("models/m/config.pbtxt", b"max_batch_size: 4")
    wait_until(lambda: stack.state("m", 1) == ("READY", ""), 20)


def test_an_invalid_config_on_a_new_model_makes_it_unavailable_with_the_parse_error(stack):
    stack.put("models/fresh/config.pbtxt", b"max_batch_size: [")
    stack.put("models/fresh/1/model.onnx", builders.onnx_mlp())
    assert "config.pbtxt is not valid" in stack.wait_state("fresh", 1, "UNAVAILABLE")


@pytest.mark.torch
def test_torchscript_with_its_config_becomes_ready(stack):
    stack.put("models/ts/config.pbtxt", builders.TORCHSCRIPT_CONFIG)
    stack.put("models/ts/1/model.pt", builders.torchscript_mlp())
    stack.wait_state("ts", 1, "READY")
    [entry] = stack.api.get("/models/ts/1").json()
    assert entry["runtime"] == "torchscript"
    assert entry["batchSize"] == 8


def test_keys_outside_the_layout_are_ignored(stack):
    stack.put("models/README.md", b"hello")
    stack.put("models/m/notes/readme.txt", b"hello")
    stack.put("models/m/1/model.onnx", builders.onnx_mlp())
    stack.wait_state("m", 1, "READY")
    assert [e["name"] for e in stack.index()] == ["m"]


def test_config_fields_not_applied_are_warnings_beside_ready(stack, caplog):
    """Given a config asking for what lambdaserve accepts and does not apply,
    When it is published,
    Then the version serves, and describe, the repository index's READY entry and the log
    at publish each say what is not applied, each warning whole (its own "; " kept)."""
    config = b"""
    instance_group [{ kind: KIND_CPU count: 4 }]
    response_cache { enable: true }
    dynamic_batching { priority_levels: 2 default_priority_level: 1 }
    parameters { key: "k" value: { string_value: "v" } }
    """
    caplog.set_level(logging.WARNING, logger="lambdaserve.publishing")
    stack.put("models/m/config.pbtxt", config)
    stack.put("models/m/1/model.onnx", builders.onnx_mlp())
    stack.wait_state("m", 1, "READY")
    [entry] = stack.api.get("/models/m/1").json()
    warnings = entry["configWarnings"]
    [count] = [w for w in warnings if w.startswith("parameters is not applied")]
    assert count.endswith("are not read here"), count  # not cut at its "; "
    # applied: the response cache, the instances, the priority levels (by serve, dev and queued
    # work: the one warning about them says the infer function's requests are not ordered)
    assert not any(w.startswith(("response_cache", "instance_group")) for w in warnings)
    [levels] = [w for w in warnings if w.startswith("dynamic")]
    assert levels.startswith("dynamic_batching priority_levels orders requests in `serve`")
    [indexed] = [e for e in stack.index() if e["name"] == "m"]
    assert indexed["warnings"] == warnings and indexed["reason"] == ""
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("m config: ")]
    assert f"m config: {count}" in logged


def test_an_empty_dynamic_batching_block_batches_without_a_warning(stack):
    """Given Triton's most common spelling, `dynamic_batching { }`,
    Then the version is READY with no warning in describe or in the index."""
    stack.put("models/m/config.pbtxt", b"max_batch_size: 8\ndynamic_batching { }\n")
    stack.put("models/m/1/model.onnx", builders.onnx_mlp())
    stack.wait_state("m", 1, "READY")
    [entry] = stack.api.get("/models/m/1").json()
    assert entry["configWarnings"] == [] and entry["batchSize"] == 8
    assert "warnings" not in next(e for e in stack.index() if e["name"] == "m")


def test_iterative_sequence_is_refused_at_publish_never_ready_then_failing(stack):
    config = b"max_batch_size: 8 sequence_batching { iterative_sequence: true }"
    stack.put("models/seq/config.pbtxt", config)
    stack.put("models/seq/1/model.onnx", builders.onnx_mlp())
    reason = stack.wait_state("seq", 1, "UNAVAILABLE")
    assert "iterative_sequence is not supported" in reason


def test_a_gpu_model_served_on_cpu_says_so_in_its_entry_and_its_load_log(stack, caplog):
    # Given a model whose config asks for a GPU, on a machine (this one) without CUDA
    stack.put("models/g/config.pbtxt", b"instance_group [{ kind: KIND_GPU }]")
    stack.put("models/g/1/model.onnx", builders.onnx_mlp())
    stack.wait_state("g", 1, "READY")
    # Then its catalog entry says where it runs
    [entry] = stack.api.get("/models/g/1").json()
    assert any("KIND_GPU" in w and "CPU" in w for w in entry["configWarnings"])
    # And loading it on CPU logs so, with the model, version and why
    caplog.set_level(logging.WARNING, logger="lambdaserve")
    body = {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": [0] * 4}]}
    assert stack.inference.post("/v2/models/g/infer", json=body).status_code == 200
    [line] = [r.getMessage() for r in caplog.records if "asks for a GPU" in r.getMessage()]
    assert line.startswith("g version 1 asks for a GPU") and "runs on cpu" in line
