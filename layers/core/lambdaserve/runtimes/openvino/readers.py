"""How OpenVINO reads each model format lambdaserve gives it: one reader per model file.

A new format is one more entry in READERS (the model file, as the version directory holds
it), its file in ``config.model_files.MODEL_FILES`` and, when Triton names it, its platform
or backend in ``config.checks``. Readers raise ModelRejected saying what to fix in the user's files.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from lambdaserve.errors import ModelRejected
from lambdaserve.runtimes.openvino.savedmodel import lookup_table_fix

Reader = Callable[[Any, Path], Any]


def read_ir(core: Any, path: Path) -> Any:
    """model.xml with its weights, model.bin, beside it (what openvino.save_model writes)."""
    weights = path.with_name("model.bin")
    try:
        if weights.is_file():
            return core.read_model(str(path), str(weights))
        return core.read_model(str(path))
    except Exception as exc:  # OpenVINO raises RuntimeError with pages of context
        fix = (
            "write the IR with openvino.save_model (or ovc) and upload model.xml with model.bin"
            if weights.is_file()
            else "upload model.bin (its weights) beside model.xml"
        )
        raise ModelRejected(f"OpenVINO cannot read model.xml: {reason(exc)}; {fix}") from exc


def read_onnx(core: Any, path: Path) -> Any:
    """model.onnx under backend: "openvino"; external data stays in the version directory."""
    from lambdaserve.runtimes.onnx import check_external_data

    check_external_data(path)
    try:
        return core.read_model(str(path))
    except Exception as exc:
        raise ModelRejected(f"OpenVINO cannot read model.onnx: {reason(exc)}") from exc


def read_savedmodel(core: Any, path: Path) -> Any:
    """A TF SavedModel as Triton lays it out (model.savedmodel/saved_model.pb + variables/)
    or as TF Serving does (saved_model.pb + variables/ in the version directory), read by
    OpenVINO's TensorFlow frontend (no TensorFlow): the serving_default signature, its
    tensors named as the signature names them."""
    directory = path.parent
    try:
        return core.read_model(str(directory))
    except Exception as exc:
        if fix := lookup_table_fix(str(exc)):
            raise ModelRejected(f"OpenVINO cannot read the SavedModel: {fix}") from exc
        raise ModelRejected(
            f"OpenVINO cannot read the SavedModel: {reason(exc)}; save it with "
            "tf.saved_model.save(..., signatures={'serving_default': ...}) and upload the "
            "whole directory (saved_model.pb and variables/), as model.savedmodel/ or "
            "straight into the version"
        ) from exc


def read_paddle(core: Any, path: Path) -> Any:
    """A Paddle inference model: model.pdmodel with model.pdiparams beside it."""
    try:
        return core.read_model(str(path))
    except Exception as exc:
        fix = (
            "save it with paddle.jit.save (FLAGS_enable_pir_api=0 before importing paddle "
            "writes model.pdmodel)"
            if path.with_name("model.pdiparams").is_file()
            else "upload model.pdiparams (its weights) beside model.pdmodel"
        )
        raise ModelRejected(f"OpenVINO cannot read model.pdmodel: {reason(exc)}; {fix}") from exc


# The model file (relative to the version directory) -> how OpenVINO reads it.
READERS: dict[str, Reader] = {
    "model.xml": read_ir,
    "model.onnx": read_onnx,
    "model.savedmodel/saved_model.pb": read_savedmodel,
    "saved_model.pb": read_savedmodel,
    "model.pdmodel": read_paddle,
}


def reader_for(model_path: Path) -> Reader:
    """The reader of the model file at ``model_path`` (inside a version directory)."""
    for name, reader in READERS.items():
        if model_path.as_posix().endswith("/" + name) or model_path.as_posix() == name:
            return reader
    raise ModelRejected(
        f"OpenVINO does not read {model_path.name}; upload one of {', '.join(READERS)}"
    )


def reason(exc: BaseException) -> str:
    """OpenVINO's messages start with source locations (``Exception from src/...``): the
    line that says what is wrong is the last non-empty one before its traceback."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    useful = [
        line
        for line in lines
        if not line.startswith(("Exception from", "Check '", "[ GENERAL_ERROR ]"))
    ]
    return (useful or lines or [type(exc).__name__])[-1][:300].rstrip(".!")
