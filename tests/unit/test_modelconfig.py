from __future__ import annotations

import json
from pathlib import Path

import pytest

from lambdaserve.config.dynamic_batching import QueuePolicy
from lambdaserve.config.model_config import (
    DynamicBatching,
    VersionPolicy,
    build,
    merge,
    parse_document,
    parse_overrides,
)
from lambdaserve.errors import InvalidInput
from lambdaserve.tensors.signature import TensorSpec

FIXTURES = Path(__file__).parent.parent / "fixtures"


def test_tritons_densenet_example_config_parses():
    # Given Triton's own densenet_onnx config.pbtxt
    body = (FIXTURES / "densenet_onnx.config.pbtxt").read_bytes()
    # When parsed and built
    config = build(parse_document("config.pbtxt", body), "densenet_onnx")
    # Then tensors come out in v2 datatypes with Triton's dims (no batch dim at max_batch_size 0)
    assert config.platform == "onnxruntime_onnx"
    assert config.max_batch_size == 0
    assert config.inputs == (TensorSpec("data_0", "FP32", (3, 224, 224)),)
    assert config.outputs == (TensorSpec("fc6_1", "FP32", (1000,)),)
    assert config.version_policy == VersionPolicy("latest", 1)
    # and what Triton applies from it: the reshapes and the input's image format
    assert [(r.name, r.client_shape, r.model_shape) for r in config.reshapes] == [
        ("data_0", (3, 224, 224), (1, 3, 224, 224)),
        ("fc6_1", (1000,), (1, 1000, 1, 1)),
    ]
    assert config.input_formats == (("data_0", "FORMAT_NCHW"),)


def test_batched_config_with_policy_batching_and_gpu_instances():
    body = (FIXTURES / "resnet_batched.config.pbtxt").read_bytes()
    config = build(parse_document("config.pbtxt", body), "resnet")
    assert config.backend == "onnxruntime"
    assert config.inputs[0] == TensorSpec("input", "FP32", (-1, 3, -1, -1))
    assert config.inputs[1] == TensorSpec("ids", "INT64", (-1, 4))
    assert [t.datatype for t in config.outputs] == ["FP16", "BYTES"]
    assert config.version_policy == VersionPolicy("latest", 2)
    assert config.dynamic_batching == DynamicBatching((4, 8), 500)
    assert config.instance_kind == "GPU"


def test_the_default_queue_policy_is_read_and_travels_in_tritons_json_form():
    body = b"""
    max_batch_size: 8
    input [{ name: "x" data_type: TYPE_FP32 dims: [2] }]
    dynamic_batching {
      max_queue_delay_microseconds: 1000000
      default_queue_policy {
        max_queue_size: 1 default_timeout_microseconds: 2500
        timeout_action: DELAY allow_timeout_override: true
      }
    }
    """
    config = build(parse_document("config.pbtxt", body), "m")
    assert config.dynamic_batching is not None
    assert config.dynamic_batching.queue_policy == QueuePolicy(1, 0.0025, False, True)
    document = config.to_triton_json()["dynamic_batching"]
    assert document["default_queue_policy"] == {
        "max_queue_size": 1,
        "default_timeout_microseconds": 2500,
        "timeout_action": "DELAY",
        "allow_timeout_override": True,
    }
    assert (
        build(parse_document("config.json", json.dumps(config.to_triton_json()).encode()), "m")
        == config
    )


def test_config_json_in_tritons_json_form():
    body = (
        b'{"max_batch_size": 4, "version_policy": {"specific": {"versions": [3, 1]}},'
        b' "input": [{"name": "x", "data_type": "TYPE_INT32", "dims": [2]}]}'
    )
    config = build(parse_document("config.json", body), "m")
    assert config.version_policy == VersionPolicy("specific", versions=(1, 3))
    assert config.inputs == (TensorSpec("x", "INT32", (-1, 2)),)


def test_all_policy_survives_the_round_trip_through_storage():
    document = parse_document("config.pbtxt", b"version_policy: { all { } }")
    assert document["version_policy"] == {"all": {}}
    assert build(document, "m").version_policy.kind == "all"


@pytest.mark.parametrize(
    ("filename", "body", "message"),
    [
        ("config.pbtxt", b"max_batch_size: [", "config.pbtxt is not valid"),
        ("config.pbtxt", b"no_such_field: 1", "no_such_field"),
        ("config.json", b"{not json", "config.json is not valid"),
        ("config.json", b'{"max_batch_size": "many"}', "max_batch_size"),
        ("config.pbtxt", b"\xff\xfe", "not valid"),
    ],
)
def test_invalid_config_files_say_what_is_wrong(filename, body, message):
    with pytest.raises(InvalidInput, match=message):
        parse_document(filename, body)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"name": "other"}, "lives under models/m/"),
        ({"version_policy": {"latest": {"num_versions": 0}}}, "num_versions >= 1"),
        ({"version_policy": {"specific": {}}}, "one or more positive versions"),
        ({"max_batch_size": -1}, "max_batch_size"),
        ({"input": [{"name": "x", "dims": [3]}]}, "data_type"),
        ({"input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [0]}]}, "dims are positive"),
    ],
)
def test_semantic_errors_are_rejected_with_a_reason(document, message):
    with pytest.raises(InvalidInput, match=message):
        build(document, "m")


def test_overrides_replace_whole_fields_of_the_file_config():
    # Given a file config with latest 2 and an API override to "all"
    file_doc = parse_document(
        "config.pbtxt", b"max_batch_size: 8 version_policy: { latest { num_versions: 2 } }"
    )
    overrides = parse_overrides({"versionPolicy": {"all": {}}})
    # When merged
    config = build(merge(file_doc, overrides), "m")
    # Then the override wins and untouched fields stay
    assert config.version_policy.kind == "all"
    assert config.max_batch_size == 8


def test_overrides_reject_unknown_fields():
    with pytest.raises(InvalidInput, match="no_such"):
        parse_overrides({"no_such": 1})


def test_the_echo_keeps_the_rate_limiter_and_the_states_initial_state_it_applies():
    # Given a config with an instance group's rate_limiter and a state's initial_state
    body = b"""
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU
  rate_limiter { resources [ { name: "R1" count: 3 }, { name: "G" global: true count: 1 } ]
                 priority: 2 } } ]
sequence_batching {
  state [ { input_name: "ACC_IN" output_name: "ACC_OUT" data_type: TYPE_INT32 dims: [ 1 ]
            initial_state { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "z" } },
          { input_name: "B_IN" output_name: "B_OUT" data_type: TYPE_INT32 dims: [ 2 ]
            initial_state { data_type: TYPE_INT32 dims: [ 2 ] data_file: "b.bin" name: "f" } } ]
}
"""
    # When it is built and echoed in Triton's JSON form
    echo = build(parse_document("config.pbtxt", body), "m").to_triton_json()
    # Then both are there as Triton writes them
    assert echo["instance_group"][0]["rate_limiter"] == {
        "resources": [
            {"name": "R1", "global": False, "count": 3},
            {"name": "G", "global": True, "count": 1},
        ],
        "priority": 2,
    }
    first, second = echo["sequence_batching"]["state"]
    assert first["initial_state"] == [
        {"name": "z", "data_type": "TYPE_INT32", "dims": [1], "zero_data": True}
    ]
    assert second["initial_state"] == [
        {"name": "f", "data_type": "TYPE_INT32", "dims": [2], "data_file": "b.bin"}
    ]
