"""A model config checked against the model, the way Triton checks it at load time.

Platform/backend against the model file, declared tensors against the model's own
(names, datatypes, rank and dims, with ``max_batch_size > 0`` adding the batch dimension),
and ``max_batch_size`` against a model whose first dimension cannot batch.
"""

from __future__ import annotations

from collections.abc import Iterable

from lambdaserve.config.model_config import ModelConfig
from lambdaserve.config.model_files import MODEL_FILES
from lambdaserve.config.reshape import model_side
from lambdaserve.errors import ModelRejected
from lambdaserve.tensors.signature import Signature, TensorSpec

_SAVEDMODEL = "model.savedmodel/saved_model.pb"
_TF_SERVING_SAVEDMODEL = "saved_model.pb"
PLATFORM_FILES = {
    "onnxruntime_onnx": ("model.onnx",),
    "pytorch_libtorch": ("model.pt",),
    "tensorflow_savedmodel": (_SAVEDMODEL, _TF_SERVING_SAVEDMODEL),
}
BACKEND_FILES = {
    "onnxruntime": ("model.onnx",),
    "pytorch": ("model.pt",),
    "python": ("model.py",),
    "openvino": ("model.xml", "model.onnx", _SAVEDMODEL, _TF_SERVING_SAVEDMODEL, "model.pdmodel"),
    "tensorflow": (_SAVEDMODEL, _TF_SERVING_SAVEDMODEL),
    "paddle": ("model.pdmodel", "__model__"),
    "paddle_inference": ("model.pdmodel", "__model__"),
}
SUPPORTED = (
    "platform onnxruntime_onnx (model.onnx), pytorch_libtorch (model.pt) or "
    "tensorflow_savedmodel (model.savedmodel/), or backend openvino (model.xml, model.onnx, "
    "model.savedmodel/, model.pdmodel), paddle or paddle_inference (model.pdmodel, __model__) or "
    "python (model.py)"
)
# Triton's model files for what it serves and lambdaserve does not (yet).
OTHER_FILES = {
    "tensorrt_plan": "model.plan",
    "tensorflow_graphdef": "model.graphdef",
}


def check_platform(config: ModelConfig, files: Iterable[str]) -> None:
    """The config's platform/backend is one lambdaserve serves, and matches the file."""
    present = [name for name in MODEL_FILES if name in set(files)]
    for field, declared, table in (
        ("platform", config.platform, PLATFORM_FILES),
        ("backend", config.backend, BACKEND_FILES),
    ):
        if not declared:
            continue
        wanted = table.get(declared)
        if wanted is None:
            raise ModelRejected(
                f"{field} {declared!r} is not supported; lambdaserve serves {SUPPORTED}"
            )
        if present and not set(wanted) & set(present):
            raise ModelRejected(
                f"{field} {declared!r} needs {' or '.join(wanted)}, but the version has "
                f"{present[0]}; upload {wanted[0]}, or change the {field} in the model's config"
            )


def check_tensors(config: ModelConfig, signature: Signature) -> None:
    """Declared tensors exist in the model with its datatype, rank and dims."""
    for role, declared, actual in (
        ("input", config.inputs, signature.inputs),
        ("output", config.outputs, signature.outputs),
    ):
        names = {t.name: t for t in actual}
        for spec in declared:
            found = names.get(spec.name)
            if found is None:
                raise ModelRejected(
                    f"config declares {role} {spec.name!r} but the model has {sorted(names)}"
                )
            if found.datatype != spec.datatype:
                raise ModelRejected(
                    f"config declares {role} {spec.name!r} as {spec.datatype} but the model "
                    f"has {found.datatype}"
                )
            if role == "input" and _ragged(config, spec.name):
                if len(found.shape) != 1:
                    raise ModelRejected(
                        f"input {spec.name!r} allows ragged batches: the model takes it as "
                        f"one dimension (the requests' data joined), but its shape is "
                        f"{list(found.shape)}"
                    )
                continue
            reshaped = model_side(config.reshapes, role, spec.name)
            model_spec = (
                spec if reshaped is None else TensorSpec(spec.name, spec.datatype, reshaped)
            )
            _check_dims(role, model_spec, found, config.max_batch_size)
    if config.sequence_batching is not None and config.backend != "python":
        _check_sequence_tensors(config, signature)
    if config.max_batch_size > 0:
        for spec in signature.inputs:
            if spec.shape[:1] not in ((-1,),):
                raise ModelRejected(
                    f"max_batch_size {config.max_batch_size} needs a batch (first, dynamic) "
                    f"dimension on input {spec.name!r}, but the model's shape is "
                    f"{list(spec.shape)}; set max_batch_size: 0 and give full dims"
                )


def _ragged(config: ModelConfig, name: str) -> bool:
    return config.ragged_batching is not None and name in config.ragged_batching.ragged


def _check_sequence_tensors(config: ModelConfig, signature: Signature) -> None:
    """The tensors the sequence batcher fills (controls, states) are the model's own, of the
    datatype the config gives them. A Python model's signature is its config's: it is not
    checked here."""
    batching = config.sequence_batching
    assert batching is not None
    wanted = [
        ("input", c.tensor, c.datatype, f"control_input {c.tensor!r}") for c in batching.controls
    ]
    for state in batching.states:
        wanted.append(("input", state.input_name, state.datatype, f"state {state.input_name!r}"))
        wanted.append(("output", state.output_name, state.datatype, f"state {state.input_name!r}"))
    tensors = {"input": signature.inputs, "output": signature.outputs}
    for role, name, datatype, what in wanted:
        found = {t.name: t for t in tensors[role]}
        if name not in found:
            raise ModelRejected(
                f"sequence_batching {what} names {role} {name!r}, which the model does not "
                f"have: its {role}s are {sorted(found)}"
            )
        if found[name].datatype != datatype:
            raise ModelRejected(
                f"sequence_batching {what}: the model's {role} {name!r} is "
                f"{found[name].datatype}, the config says {datatype}"
            )


def _check_dims(role: str, spec: TensorSpec, found: TensorSpec, max_batch_size: int) -> None:
    batch_note = (
        f" (max_batch_size {max_batch_size} adds the batch dimension to the config's dims)"
        if max_batch_size > 0
        else ""
    )
    if len(spec.shape) != len(found.shape):
        raise ModelRejected(
            f"config declares {role} {spec.name!r} with shape {list(spec.shape)}{batch_note}, "
            f"but the model's has {len(found.shape)} dimensions: {list(found.shape)}"
        )
    for index, (declared, actual) in enumerate(zip(spec.shape, found.shape, strict=True)):
        if declared != actual and -1 not in (declared, actual):
            raise ModelRejected(
                f"config declares {role} {spec.name!r} with shape {list(spec.shape)}"
                f"{batch_note}, but the model's dimension {index} is {actual}: "
                f"{list(found.shape)}"
            )


def check_config_against_model(config: ModelConfig, signature: Signature, model_file: str) -> None:
    """Everything Triton checks of a config against a loaded model."""
    check_platform(config, [model_file])
    check_tensors(config, signature)
