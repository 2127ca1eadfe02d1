"""Every field a Triton config sets, walked through Triton's own ``ModelConfig`` message
(tritonclient's descriptor), against what lambdaserve applies: whatever a config sets and
lambdaserve does not apply is named, nested fields included (``instance_group.gpus``,
``dynamic_batching.preserve_ordering``), so nothing a config says vanishes without a word."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from google.protobuf import json_format

from lambdaserve.config.triton_proto import pb

# Field paths applied as Triton applies them ("a.b" covers everything under a.b too)
APPLIED = (
    "name",
    "platform",
    "backend",
    "max_batch_size",
    "input.name",
    "input.data_type",
    "input.dims",
    "input.reshape",
    "input.format",
    # a request may leave the input out; the model gets no tensor (serving/binding.py)
    "input.optional",
    # ragged batches: config/ragged_batching.py, batching/ragged.py
    "input.allow_ragged_batch",
    "batch_input",
    "batch_output",
    "output.name",
    "output.data_type",
    "output.dims",
    "output.reshape",
    "output.label_filename",
    "version_policy",
    "dynamic_batching.preferred_batch_size",
    "dynamic_batching.max_queue_delay_microseconds",
    "dynamic_batching.default_queue_policy",
    # batching/priorities.py: a queue per level, its own policy; preserve_ordering
    "dynamic_batching.priority_levels",
    "dynamic_batching.default_priority_level",
    "dynamic_batching.priority_queue_policy",
    "dynamic_batching.preserve_ordering",
    "instance_group.name",
    "instance_group.kind",
    # serving/instances.py: N instances a process (model code: N workers); Lambda: a stated
    # count bounds the version's executions across the fleet (serving/fleet_slots)
    "instance_group.count",
    # serving/rate_limiter.py, under `serve --rate-limit execution_count` (off: ignored, as
    # in Triton)
    "instance_group.rate_limiter",
    "ensemble_scheduling",
    "model_warmup",
    "default_model_filename",
    # refused when they ask for what cannot be served (config/support.py)
    "model_transaction_policy",
    # serving/sequences: controls, idle limit, implicit state (a data_file is refused)
    "sequence_batching.control_input",
    "sequence_batching.max_sequence_idle_microseconds",
    "sequence_batching.iterative_sequence",
    "sequence_batching.state.input_name",
    "sequence_batching.state.output_name",
    "sequence_batching.state.data_type",
    "sequence_batching.state.dims",
    "sequence_batching.state.initial_state",
    "sequence_batching.oldest.max_candidate_sequences",
    "sequence_batching.oldest.preferred_batch_size",
    # serving/response_cache/lookups.py
    "response_cache",
)
# Empty messages that choose something (Triton's default strategy), whose fields are not
APPLIED_WHEN_EMPTY = ("sequence_batching.direct",)
# Said in their own words elsewhere (config/support.py)
SAID_ELSEWHERE = (
    "optimization",
    "model_repository_agents",
    "model_operations",
    "model_metrics",
)
_WHY = {
    "sequence_batching.oldest.max_queue_delay_microseconds": (
        "steps wait only while the version's batch before them runs (the dynamic batcher's "
        "lane), never for company"
    ),
    "sequence_batching.oldest.preserve_ordering": "each step is answered as it completes",
    "sequence_batching.direct.max_queue_delay_microseconds": "each step runs when it arrives",
    "sequence_batching.direct.minimum_slot_utilization": "each step runs when it arrives",
    "sequence_batching.state.use_same_buffer_for_input_output": (
        "the state travels through the sequence store, copied"
    ),
    "sequence_batching.state.use_growable_memory": "a state's dims are fixed",
    "instance_group.gpus": "a process uses the one device it was given (LAMBDASERVE_DEVICE)",
    "instance_group.secondary_devices": "one device per process",
    "instance_group.profile": "TensorRT profiles do not apply to these runtimes",
    "instance_group.passive": "every instance here takes requests",
    "instance_group.host_policy": "one host policy: the process's",
    "runtime": "the runtime is chosen by the model file (and backend: openvino)",
    "cc_model_filenames": "a model file per GPU compute capability does not apply here",
    "metric_tags": "metrics carry the model and version labels only",
    "parameters": (
        "they reach Python models (args['model_config']); Triton's ONNX Runtime, PyTorch and "
        "OpenVINO backend parameters (thread counts, execution modes, EXECUTION_ENV_PATH) "
        "are not read here"
    ),
}


def unapplied(document: dict[str, Any]) -> list[str]:
    """One warning per field path the config sets that lambdaserve does not apply."""
    message = pb.ModelConfig()
    try:
        json_format.ParseDict(document, message, ignore_unknown_fields=True)
    except json_format.ParseError:
        return []  # the config is refused with its parse error elsewhere
    warnings = []
    for path in sorted(set(_set_paths(message, ""))):
        if _covered(path, APPLIED) or _covered(path, SAID_ELSEWHERE):
            continue
        if path == "parameters" and message.backend == "python":
            continue  # model code reads them (args["model_config"]), as in Triton
        why = _WHY.get(path)
        warnings.append(f"{path} is not applied" + (f": {why}" if why else ""))
    return warnings


def _covered(path: str, prefixes: tuple[str, ...]) -> bool:
    return any(path == p or path.startswith(p + ".") for p in prefixes)


def _set_paths(message: Any, prefix: str) -> Iterator[str]:
    for descriptor, value in message.ListFields():
        path = f"{prefix}{descriptor.name}"
        if _covered(path, APPLIED) or _covered(path, SAID_ELSEWHERE) or path in _WHY:
            yield path
            continue
        if descriptor.message_type is None or descriptor.message_type.GetOptions().map_entry:
            yield path
            continue
        items = value if descriptor.is_repeated else [value]
        nested = [p for item in items for p in _set_paths(item, path + ".")]
        if nested:
            yield from nested
        elif not _applied_within(path):
            yield path
        # else an empty message of which lambdaserve applies a part: its defaults apply
        # (``dynamic_batching { }`` batches, ``instance_group [{ }]`` is one instance)


def _applied_within(path: str) -> bool:
    return path in APPLIED_WHEN_EMPTY or any(p.startswith(path + ".") for p in APPLIED)
