"""Every field path of Triton's own ``ModelConfig`` descriptor (tritonclient's), set alone:
the config's warnings say "not applied" exactly when lambdaserve does not apply it, and an
empty message of which lambdaserve applies a part (``dynamic_batching { }``) is applied.

The table below is this test's own classification, written from what the serving code does;
a field Triton adds fails the test until someone decides which side it is on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor

from lambdaserve.config.support import check_supported, warnings_for
from lambdaserve.config.triton_proto import pb
from lambdaserve.errors import InvalidInput

# Set alone, these are refused at publish with their reason (never READY, never warned).
REFUSED = ("sequence_batching.iterative_sequence",)
# Set alone, these are applied: no "not applied" warning.
APPLIED = {
    "name",
    "platform",
    "backend",
    "max_batch_size",
    "default_model_filename",
    "version_policy",
    "version_policy.latest",
    "version_policy.latest.num_versions",
    "version_policy.all",
    "version_policy.specific",
    "version_policy.specific.versions",
    "input",
    "input.name",
    "input.data_type",
    "input.format",
    "input.optional",
    "input.allow_ragged_batch",
    "input.dims",
    "input.reshape",
    "input.reshape.shape",
    "output",
    "output.name",
    "output.data_type",
    "output.dims",
    "output.reshape",
    "output.reshape.shape",
    "output.label_filename",
    # an empty optimization block asks for nothing
    "optimization",
    "dynamic_batching",
    "dynamic_batching.preferred_batch_size",
    "dynamic_batching.max_queue_delay_microseconds",
    "dynamic_batching.default_queue_policy",
    "dynamic_batching.default_queue_policy.timeout_action",
    "dynamic_batching.default_queue_policy.default_timeout_microseconds",
    "dynamic_batching.default_queue_policy.allow_timeout_override",
    "dynamic_batching.default_queue_policy.max_queue_size",
    "ensemble_scheduling",
    # ragged batches (config/ragged_batching.py, batching/ragged.py)
    "batch_input",
    "batch_input.kind",
    "batch_input.target_name",
    "batch_input.data_type",
    "batch_input.source_input",
    "batch_output",
    "batch_output.target_name",
    "batch_output.kind",
    "batch_output.source_input",
    "ensemble_scheduling.step",
    "ensemble_scheduling.step.model_name",
    "ensemble_scheduling.step.model_version",
    "ensemble_scheduling.step.input_map",
    "ensemble_scheduling.step.output_map",
    "ensemble_scheduling.step.model_namespace",
    "ensemble_scheduling.max_inflight_requests",
    "instance_group",
    "instance_group.name",
    "instance_group.kind",
    "instance_group.count",
    "dynamic_batching.preserve_ordering",
    "dynamic_batching.priority_levels",
    "dynamic_batching.default_priority_level",
    "dynamic_batching.priority_queue_policy",
    "instance_group.rate_limiter",
    "instance_group.rate_limiter.resources",
    "instance_group.rate_limiter.resources.name",
    "instance_group.rate_limiter.resources.global",
    "instance_group.rate_limiter.resources.count",
    "instance_group.rate_limiter.priority",
    "model_warmup",
    "model_warmup.name",
    "model_warmup.batch_size",
    "model_warmup.inputs",
    "model_warmup.count",
    "model_transaction_policy",
    "model_transaction_policy.decoupled",
    "response_cache",
    "response_cache.enable",
    "sequence_batching",
    "sequence_batching.control_input",
    "sequence_batching.control_input.name",
    "sequence_batching.control_input.control",
    "sequence_batching.control_input.control.kind",
    "sequence_batching.control_input.control.int32_false_true",
    "sequence_batching.control_input.control.fp32_false_true",
    "sequence_batching.control_input.control.bool_false_true",
    "sequence_batching.control_input.control.data_type",
    "sequence_batching.direct",
    "sequence_batching.oldest",
    "sequence_batching.oldest.max_candidate_sequences",
    "sequence_batching.oldest.preferred_batch_size",
    "sequence_batching.max_sequence_idle_microseconds",
    "sequence_batching.state",
    "sequence_batching.state.input_name",
    "sequence_batching.state.output_name",
    "sequence_batching.state.data_type",
    "sequence_batching.state.dims",
    "sequence_batching.state.initial_state",
    "sequence_batching.state.initial_state.name",
    "sequence_batching.state.initial_state.data_type",
    "sequence_batching.state.initial_state.dims",
    "sequence_batching.state.initial_state.zero_data",
    "sequence_batching.state.initial_state.data_file",
    # empty blocks that ask for nothing
    "model_operations",
    "model_repository_agents",
    "model_metrics",
}
# Set alone, these are said "not applied" (each, in config/unapplied_fields.py or
# config/support.py, with why).
NOT_APPLIED = {
    "runtime",
    "cc_model_filenames",
    "metric_tags",
    "input.is_shape_tensor",
    "input.is_non_linear_format_io",
    "output.is_shape_tensor",
    "output.is_non_linear_format_io",
    "instance_group.gpus",
    "instance_group.secondary_devices",
    "instance_group.secondary_devices.kind",
    "instance_group.secondary_devices.device_id",
    "instance_group.profile",
    "instance_group.passive",
    "instance_group.host_policy",
    "model_operations.op_library_filename",
    "model_repository_agents.agents",
    "model_repository_agents.agents.name",
    "model_repository_agents.agents.parameters",
    "model_metrics.metric_control",
    "model_metrics.metric_control.metric_identifier",
    "model_metrics.metric_control.metric_identifier.family",
    "model_metrics.metric_control.histogram_options",
    "model_metrics.metric_control.histogram_options.buckets",
    "sequence_batching.oldest.max_queue_delay_microseconds",
    "sequence_batching.oldest.preserve_ordering",
    "sequence_batching.direct.max_queue_delay_microseconds",
    "sequence_batching.direct.minimum_slot_utilization",
    "sequence_batching.state.use_growable_memory",
    "sequence_batching.state.use_same_buffer_for_input_output",
}
# Everything inside an optimization block: ONNX Runtime's, TorchScript's and OpenVINO's own
# defaults apply.
NOT_APPLIED_UNDER = ("optimization.",)
# Python models read the parameters (args["model_config"]); another runtime's does not.
PYTHON_ONLY = {"parameters"}


def field_paths(descriptor: Any, prefix: str = "") -> Iterator[str]:
    for field in descriptor.fields:
        path = prefix + field.name
        yield path
        message = field.message_type
        if message is not None and not message.GetOptions().map_entry:
            yield from field_paths(message, path + ".")


def set_alone(path: str) -> dict[str, Any]:
    """A config document (Triton's JSON form) that sets ``path`` and nothing else."""
    config = pb.ModelConfig()
    message: Any = config
    *parents, leaf = path.split(".")
    for name in parents:
        field = message.DESCRIPTOR.fields_by_name[name]
        value = getattr(message, name)
        message = value.add() if field.is_repeated else value
    field = message.DESCRIPTOR.fields_by_name[leaf]
    value = getattr(message, leaf)
    repeated = field.is_repeated
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key_field = field.message_type.fields_by_name["key"]
        value_field = field.message_type.fields_by_name["value"]
        key = scalar(key_field)
        if value_field.message_type is None:
            value[key] = scalar(value_field)
        else:
            value[key].SetInParent()  # a message value: set by the lookup
    elif field.message_type is not None:
        value.add() if repeated else value.SetInParent()
    else:
        sample = scalar(field)
        value.append(sample) if repeated else setattr(message, leaf, sample)
    return json_format.MessageToDict(config, preserving_proto_field_name=True)


def scalar(field: Any) -> Any:
    if field.enum_type is not None:
        return field.enum_type.values[-1].number  # not the default (the first)
    if field.type == FieldDescriptor.TYPE_BOOL:
        return True
    if field.type == FieldDescriptor.TYPE_STRING:
        return "x"
    if field.type in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        return 2.0
    return 4


PATHS = sorted(set(field_paths(pb.ModelConfig.DESCRIPTOR)))


def test_the_table_classifies_every_field_triton_has():
    """Given Triton's ModelConfig descriptor, Then every path it has is known here."""
    assert len(PATHS) > 150
    classified = APPLIED | PYTHON_ONLY | NOT_APPLIED
    for path in PATHS:
        known = path in classified or path.startswith(REFUSED + NOT_APPLIED_UNDER)
        assert known, f"{path}: applied or not?"
    assert not APPLIED & NOT_APPLIED


@pytest.mark.parametrize("backend", ["onnxruntime", "python"])
@pytest.mark.parametrize("path", PATHS)
def test_a_field_set_alone_is_said_not_applied_exactly_when_it_is_not(path, backend):
    """Given a config setting one field path alone (for an ONNX and a Python model),
    When its warnings are computed as at publish,
    Then it is refused (what sequence batching cannot serve), or "not applied" is said
    exactly for the fields lambdaserve does not apply."""
    document = set_alone(path)
    if path != "backend":
        document["backend"] = backend
    if path.startswith(REFUSED):
        with pytest.raises(InvalidInput):
            check_supported(document)
        return
    if path == "model_transaction_policy.decoupled" and backend != "python":
        with pytest.raises(InvalidInput):  # decoupled is for Python models: refused
            check_supported(document)
        return
    said = [w for w in warnings_for(document) if "not applied" in w]
    applied = path in APPLIED or (path in PYTHON_ONLY and backend == "python")
    assert bool(said) != applied, (document, said)


def test_an_empty_dynamic_batching_block_batches_and_is_not_warned():
    """Given Triton's most common spelling, `dynamic_batching { }`,
    Then no warning names it."""
    assert warnings_for({"backend": "onnxruntime", "dynamic_batching": {}}) == []
