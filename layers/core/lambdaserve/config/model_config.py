"""Model configuration in Triton's form: config.pbtxt (protobuf text) or config.json.

Parsing goes through Triton's own message definitions (``tritonclient``'s
``model_config_pb2``), so anything Triton accepts parses and anything it rejects
is rejected with protobuf's own message. Inside lambdaserve the config is a
frozen dataclass; across storage it travels as Triton's JSON form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from google.protobuf import json_format

from lambdaserve.config.documents import ConfigDocument, merge, parse_document, parse_overrides
from lambdaserve.config.dynamic_batching import DynamicBatching, dynamic_batching_of
from lambdaserve.config.instance_groups import (
    RateLimits,
    instance_count_of,
    rate_limits_of,
    stated_count_of,
)
from lambdaserve.config.ragged_batching import RaggedBatching, ragged_batching_of
from lambdaserve.config.reshape import Reshape, reshapes_of
from lambdaserve.config.sequence_batching import SequenceBatching, sequence_batching_of
from lambdaserve.config.triton_proto import pb
from lambdaserve.config.warmup_samples import WarmupSample, samples_of
from lambdaserve.errors import InvalidInput
from lambdaserve.tensors.signature import TensorSpec

__all__ = [
    "ConfigDocument",
    "DynamicBatching",
    "ModelConfig",
    "build",
    "merge",
    "parse_document",
    "parse_overrides",
]
PolicyKind = Literal["latest", "all", "specific"]

_TRITON_TO_V2 = {
    "TYPE_BOOL": "BOOL",
    "TYPE_UINT8": "UINT8",
    "TYPE_UINT16": "UINT16",
    "TYPE_UINT32": "UINT32",
    "TYPE_UINT64": "UINT64",
    "TYPE_INT8": "INT8",
    "TYPE_INT16": "INT16",
    "TYPE_INT32": "INT32",
    "TYPE_INT64": "INT64",
    "TYPE_FP16": "FP16",
    "TYPE_FP32": "FP32",
    "TYPE_FP64": "FP64",
    "TYPE_STRING": "BYTES",
    "TYPE_BF16": "BF16",
}
_KINDS = {"KIND_AUTO": "AUTO", "KIND_CPU": "CPU", "KIND_GPU": "GPU", "KIND_MODEL": "MODEL"}


@dataclass(frozen=True)
class VersionPolicy:
    """Triton/TF Serving version policy."""

    kind: PolicyKind = "latest"
    num_versions: int = 1
    versions: tuple[int, ...] = ()

    def describe(self) -> str:
        if self.kind == "latest":
            return f"latest {self.num_versions}"
        if self.kind == "specific":
            return f"specific {list(self.versions)}"
        return "all"

    def to_triton_json(self) -> dict[str, Any]:
        if self.kind == "latest":
            return {"latest": {"num_versions": self.num_versions}}
        if self.kind == "specific":
            return {"specific": {"versions": list(self.versions)}}
        return {"all": {}}


@dataclass(frozen=True)
class EnsembleStep:
    """One step of Triton's ``ensemble_scheduling``: maps are step tensor -> ensemble tensor."""

    model_name: str
    model_version: int = -1
    input_map: tuple[tuple[str, str], ...] = ()
    output_map: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ModelConfig:
    """The effective configuration of one model (file config plus API overrides)."""

    name: str
    platform: str = ""
    backend: str = ""
    max_batch_size: int = 0
    inputs: tuple[TensorSpec, ...] = ()
    outputs: tuple[TensorSpec, ...] = ()
    version_policy: VersionPolicy = field(default_factory=VersionPolicy)
    dynamic_batching: DynamicBatching | None = None
    instance_kind: str = "AUTO"
    # instance_group's counts summed (Triton's defaults): instances of the version in `serve`
    # and `dev`, worker processes for model code (config.instance_groups)
    instance_count: int = 1
    # the same where the config states a count itself, else 0: the Lambda path's fleet-wide
    # bound on executions at once (serving.fleet_slots)
    stated_instance_count: int = 0
    # the instance_group's rate_limiter (Triton's rate limiter, `serve --rate-limit`)
    rate_limits: RateLimits | None = None
    ensemble_steps: tuple[EnsembleStep, ...] = ()
    # (output name, file name) for outputs with Triton's ``label_filename``.
    label_files: tuple[tuple[str, str], ...] = ()
    # Triton's free-form ``parameters { key: "k" value: { string_value: "v" } }``.
    parameters: tuple[tuple[str, str], ...] = ()
    reshapes: tuple[Reshape, ...] = ()
    warmup: tuple[WarmupSample, ...] = ()
    # Triton's input ``format`` (FORMAT_NCHW, ...) where the config declares one.
    input_formats: tuple[tuple[str, str], ...] = ()
    default_model_filename: str = ""
    # Triton's model_transaction_policy.decoupled: any number of responses per request
    decoupled: bool = False
    # Triton's response_cache { enable: true }: successful answers are kept and reused
    response_cache: bool = False
    # Triton's sequence_batching: steps of a sequence, their state kept outside the instance
    sequence_batching: SequenceBatching | None = None
    # Triton's allow_ragged_batch, batch_input and batch_output (config/ragged_batching.py)
    ragged_batching: RaggedBatching | None = None

    @property
    def optional_inputs(self) -> tuple[str, ...]:
        """Triton's input.optional: inputs a request may leave out."""
        return tuple(spec.name for spec in self.inputs if spec.optional)

    @property
    def is_ensemble(self) -> bool:
        return self.platform == "ensemble"

    def to_triton_json(self) -> dict[str, Any]:
        """Triton's JSON form, as ``GET /v2/models/{m}/config`` returns it."""
        doc: dict[str, Any] = {
            "name": self.name,
            "platform": self.platform,
            "backend": self.backend,
            "max_batch_size": self.max_batch_size,
            "version_policy": self.version_policy.to_triton_json(),
            "input": [_tensor_json(t, self.max_batch_size > 0) for t in self.inputs],
            "output": [
                _tensor_json(t, self.max_batch_size > 0) | _label_json(t.name, self.label_files)
                for t in self.outputs
            ],
            "instance_group": [{"kind": f"KIND_{self.instance_kind}"}],
        }
        if self.instance_count > 1 or self.stated_instance_count:
            doc["instance_group"][0]["count"] = self.instance_count
        if self.rate_limits is not None:
            doc["instance_group"][0]["rate_limiter"] = self.rate_limits.to_document()
        if self.ensemble_steps:
            doc["ensemble_scheduling"] = {
                "step": [
                    {
                        "model_name": step.model_name,
                        "model_version": step.model_version,
                        "input_map": dict(step.input_map),
                        "output_map": dict(step.output_map),
                    }
                    for step in self.ensemble_steps
                ]
            }
        if self.parameters:
            doc["parameters"] = {k: {"string_value": v} for k, v in self.parameters}
        if self.dynamic_batching is not None:
            doc["dynamic_batching"] = self.dynamic_batching.to_document()
        if self.decoupled:
            doc["model_transaction_policy"] = {"decoupled": True}
        if self.response_cache:
            doc["response_cache"] = {"enable": True}
        if self.sequence_batching is not None:
            doc["sequence_batching"] = self.sequence_batching.to_document()
        if self.ragged_batching is not None:
            for entry in doc["input"]:
                if entry["name"] in self.ragged_batching.ragged:
                    entry["allow_ragged_batch"] = True
            doc |= self.ragged_batching.to_document()
        return doc


_V2_TO_TRITON = {v: k for k, v in _TRITON_TO_V2.items()}


def v2_datatype_of(data_type: str) -> str:
    """A Triton config data type in v2 spelling (TYPE_FP32 -> FP32, TYPE_STRING -> BYTES)."""
    return _TRITON_TO_V2[data_type]


def triton_data_type(datatype: str) -> str:
    """A v2 datatype in Triton's config spelling (FP32 -> TYPE_FP32, BYTES -> TYPE_STRING)."""
    return _V2_TO_TRITON[datatype]


def _tensor_json(spec: TensorSpec, batched: bool) -> dict[str, Any]:
    dims = list(spec.shape[1:] if batched else spec.shape)
    doc = {"name": spec.name, "data_type": triton_data_type(spec.datatype), "dims": dims}
    return doc | ({"optional": True} if spec.optional else {})


def build(document: ConfigDocument, model: str) -> ModelConfig:
    """Turn a Triton JSON document into the effective ModelConfig of ``model``."""
    message = pb.ModelConfig()
    try:
        json_format.ParseDict(document, message)
    except json_format.ParseError as exc:
        raise InvalidInput(f"not a valid Triton model config: {exc}") from exc
    if message.name and message.name != model:
        raise InvalidInput(
            f"config names the model {message.name!r} but it lives under models/{model}/; "
            "make them match or leave name out"
        )
    if message.max_batch_size < 0:
        raise InvalidInput("max_batch_size must be 0 (no batching) or positive")
    batched = message.max_batch_size > 0
    return ModelConfig(
        name=model,
        platform=message.platform,
        backend=message.backend,
        max_batch_size=message.max_batch_size,
        inputs=tuple(_tensor(t, batched, "input") for t in message.input),
        outputs=tuple(_tensor(t, batched, "output") for t in message.output),
        version_policy=_policy(message),
        dynamic_batching=dynamic_batching_of(message),
        instance_kind=_instance_kind(message),
        instance_count=instance_count_of(message),
        stated_instance_count=stated_count_of(message),
        rate_limits=rate_limits_of(message),
        ensemble_steps=_ensemble_steps(message),
        label_files=_label_files(message),
        parameters=tuple(sorted((k, v.string_value) for k, v in message.parameters.items())),
        reshapes=reshapes_of(message, batched),
        warmup=samples_of(message, _TRITON_TO_V2),
        input_formats=tuple(
            (t.name, pb.ModelInput.Format.Name(t.format)) for t in message.input if t.format
        ),
        default_model_filename=_default_model_filename(message.default_model_filename),
        decoupled=bool(message.model_transaction_policy.decoupled),
        response_cache=bool(message.response_cache.enable),
        sequence_batching=sequence_batching_of(message, _TRITON_TO_V2),
        ragged_batching=ragged_batching_of(message),
    )


def _default_model_filename(name: str) -> str:
    if name and ("/" in name or "\\" in name or name in (".", "..")):
        raise InvalidInput(
            f"default_model_filename {name!r} must name a file in the version directory, not a path"
        )
    return name


def _label_files(message: Any) -> tuple[tuple[str, str], ...]:
    files = []
    for output in message.output:
        name = output.label_filename
        if not name:
            continue
        if "/" in name or "\\" in name or name in (".", "..", "config.pbtxt", "config.json"):
            raise InvalidInput(
                f"output {output.name!r}: label_filename {name!r} must name a file beside "
                "config.pbtxt (models/<model>/<file>), not a path"
            )
        files.append((output.name, name))
    return tuple(files)


def _label_json(output: str, label_files: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    name = dict(label_files).get(output)
    return {"label_filename": name} if name else {}


def _tensor(spec: Any, batched: bool, role: str) -> TensorSpec:
    data_type = pb.DataType.Name(spec.data_type)
    if data_type not in _TRITON_TO_V2:
        raise InvalidInput(f"{role} {spec.name!r} needs a data_type such as TYPE_FP32")
    if not spec.name:
        raise InvalidInput(f"every {role} needs a name")
    dims = tuple(int(d) for d in spec.dims)
    if any(d < -1 or d == 0 for d in dims):
        raise InvalidInput(f"{role} {spec.name!r}: dims are positive or -1 (dynamic), got {dims}")
    # With max_batch_size > 0, Triton's dims leave out the batch dimension.
    shape = (-1, *dims) if batched else dims
    optional = role == "input" and bool(spec.optional)
    return TensorSpec(spec.name, _TRITON_TO_V2[data_type], shape, optional=optional)


def _policy(message: Any) -> VersionPolicy:
    choice = message.version_policy.WhichOneof("policy_choice")
    if choice == "all":
        return VersionPolicy("all")
    if choice == "specific":
        versions = tuple(sorted({int(v) for v in message.version_policy.specific.versions}))
        if not versions or versions[0] < 1:
            raise InvalidInput("version_policy specific needs one or more positive versions")
        return VersionPolicy("specific", versions=versions)
    if choice == "latest":
        count = int(message.version_policy.latest.num_versions)
        if count < 1:
            raise InvalidInput("version_policy latest needs num_versions >= 1")
        return VersionPolicy("latest", num_versions=count)
    return VersionPolicy()


def _ensemble_steps(message: Any) -> tuple[EnsembleStep, ...]:
    if not message.HasField("ensemble_scheduling"):
        if message.platform == "ensemble":
            raise InvalidInput("platform ensemble needs ensemble_scheduling { step [...] }")
        return ()
    if message.platform != "ensemble":
        raise InvalidInput('ensemble_scheduling needs platform: "ensemble"')
    steps = []
    for index, step in enumerate(message.ensemble_scheduling.step):
        if not step.model_name:
            raise InvalidInput(f"ensemble step {index} needs a model_name")
        steps.append(
            EnsembleStep(
                model_name=step.model_name,
                model_version=int(step.model_version),
                input_map=tuple(sorted(step.input_map.items())),
                output_map=tuple(sorted(step.output_map.items())),
            )
        )
    if not steps:
        raise InvalidInput("ensemble_scheduling needs at least one step")
    return tuple(steps)


def _instance_kind(message: Any) -> str:
    kinds = {_KINDS[pb.ModelInstanceGroup.Kind.Name(g.kind)] for g in message.instance_group}
    if "GPU" in kinds:
        return "GPU"
    if "CPU" in kinds:
        return "CPU"
    return "AUTO"
