"""TorchServe's ``MAR-INF/MANIFEST.json``, read without running anything: what the archive
says its model is, checked against the files it ships (at publish, in the manage function).

A version directory holding a manifest is an unpacked ``.mar`` (TorchServe's ``no-archive``
format); a bare ``handler.py`` gets the manifest TorchServe's archiver would have written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from lambdaserve.errors import ModelRejected
from lambdaserve.runtimes.model_code import outline

MANIFEST = "MAR-INF/MANIFEST.json"
# The handlers TorchServe ships (``--handler image_classifier``), run from its ``ts`` package.
BUILTIN_HANDLERS = frozenset(
    {
        "base_handler",
        "image_classifier",
        "image_segmenter",
        "object_detector",
        "text_classifier",
        "densenet_handler",
        "vision_handler",
        "text_handler",
    }
)
_STAGES = ("preprocess", "inference", "postprocess")
DEFAULT_MAX_BATCH_DELAY_MS = 100  # TorchServe's maxBatchDelay when only batchSize is set


@dataclass(frozen=True)
class Manifest:
    """The fields of TorchServe's manifest that decide how the model is loaded."""

    document: dict[str, Any]
    model_name: str
    model_version: str
    handler: str
    serialized_file: str
    model_file: str
    config_file: str

    @property
    def handler_file(self) -> str:
        """The handler's Python file, or "" for one of TorchServe's built-in handlers."""
        module = self.handler.split(":", 1)[0]
        if module in BUILTIN_HANDLERS:
            return ""
        return module if module.endswith(".py") else f"{module}.py"


def read_manifest(path: Path) -> Manifest:
    """The manifest at ``path`` (``<model_dir>/MAR-INF/MANIFEST.json``), or ModelRejected."""
    try:
        document = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise ModelRejected(f"{MANIFEST} is not JSON: {exc}") from None
    model = document.get("model") if isinstance(document, dict) else None
    if not isinstance(model, dict):
        raise ModelRejected(
            f'{MANIFEST} has no "model" object; build the archive with torch-model-archiver'
        )
    fields = {k: model.get(k) for k in ("modelName", "modelVersion", "handler")}
    missing = [k for k, v in fields.items() if not isinstance(v, str) or not v]
    if missing:
        raise ModelRejected(f"{MANIFEST} has no model {', '.join(missing)}")
    return Manifest(
        document=document,
        model_name=model["modelName"],
        model_version=model["modelVersion"],
        handler=model["handler"],
        serialized_file=str(model.get("serializedFile") or ""),
        model_file=str(model.get("modelFile") or ""),
        config_file=str(model.get("configFile") or ""),
    )


# A bare handler's model file, as torch-model-archiver's --serialized-file names it: the
# formats TorchServe's BaseHandler loads first (TorchScript, then ONNX), then weights files.
SERIALIZED_SUFFIXES = (".pt", ".pth", ".torchscript", ".onnx", ".safetensors", ".bin", ".ckpt")
# torch-model-archiver requires --version; TorchServe's docs use "1.0".
BARE_MODEL_VERSION = "1.0"


def synthesized_manifest(model: str, model_dir: Path) -> Manifest:
    """What torch-model-archiver writes for ``--handler handler.py`` (and
    ``--serialized-file`` when the version ships a model file beside it), so a ``BaseHandler``
    subclass finds ``context.manifest`` as it would in TorchServe."""
    entry: dict[str, Any] = {
        "modelName": model,
        "handler": "handler.py",
        "modelVersion": BARE_MODEL_VERSION,
    }
    serialized = serialized_file(model_dir)
    if serialized:
        entry["serializedFile"] = serialized
    document = {"createdOn": "", "runtime": "python", "model": entry, "archiverVersion": ""}
    return Manifest(document, model, BARE_MODEL_VERSION, "handler.py", serialized, "", "")


def serialized_file(model_dir: Path) -> str:
    """The model file beside a bare handler.py: the first by ``SERIALIZED_SUFFIXES``."""
    files = sorted(p.name for p in model_dir.iterdir() if p.is_file())
    for suffix in SERIALIZED_SUFFIXES:
        for name in files:
            if name.endswith(suffix):
                return name
    return ""


def check_archive(manifest: Manifest, model_dir: Path) -> None:
    """Every file the manifest names is shipped and readable; the handler parses and defines
    what TorchServe's loader looks for. Nothing is imported or run."""
    for what, name in (
        ("serializedFile", manifest.serialized_file),
        ("modelFile", manifest.model_file),
        ("configFile", manifest.config_file),
    ):
        if name and not _inside(model_dir, name).is_file():
            raise ModelRejected(
                f"{MANIFEST} names {what} {name!r}, which the archive does not contain; "
                "rebuild it with that file"
            )
    if manifest.config_file:
        _check_yaml(model_dir / manifest.config_file)
    if manifest.handler_file:
        check_handler(_inside(model_dir, manifest.handler_file), manifest.handler)


def check_handler(path: Path, handler: str = "handler.py") -> None:
    """TorchServe's rule, statically: the named function, a module-level ``handle``, or one
    class with ``handle`` (a BaseHandler subclass inherits it)."""
    if not path.is_file():
        raise ModelRejected(f"the handler {path.name!r} is not in the archive")
    code = outline(path)
    function = handler.split(":", 1)[1] if ":" in handler else "handle"
    if function in code.functions:
        return
    if ":" in handler:
        raise ModelRejected(f"{path.name} defines no function {function!r}")
    if not code.classes:
        raise ModelRejected(
            f"{path.name} defines neither handle(data, context) nor a handler class, as "
            "TorchServe requires"
        )
    if not any(
        "handle" in methods or set(_STAGES) <= methods or name in code.derived
        for name, methods in code.classes.items()
    ):
        raise ModelRejected(
            f"{path.name}: no class has handle (or preprocess, inference and postprocess) "
            "or subclasses one of TorchServe's handlers"
        )


def _inside(model_dir: Path, name: str) -> Path:
    path = (model_dir / name).resolve()
    if not path.is_relative_to(model_dir.resolve()):
        raise ModelRejected(f"{MANIFEST} names {name!r}, outside the archive")
    return path


def _check_yaml(path: Path) -> None:
    import yaml

    try:
        document = yaml.safe_load(path.read_bytes())
    except yaml.YAMLError as exc:
        raise ModelRejected(f"{path.name} is not YAML: {str(exc).splitlines()[0]}") from None
    if document is not None and not isinstance(document, dict):
        raise ModelRejected(f"{path.name} must be a mapping (batchSize: 4, handler: ...)")


@dataclass(frozen=True)
class FrontendBatching:
    """How TorchServe's frontend batches an archive's requests (model-config.yaml's
    ``batchSize`` and ``maxBatchDelay`` in ms); ``batch_size`` 0 when the archive sets none.
    ``sequences``: its ``sequenceBatching: true`` (each request carries, or is given, a
    ``ts_request_sequence_id`` its handler reads with ``context.get_sequence_id``), with
    ``sequenceMaxIdleMSec`` (``sequence_idle_s``; 60 s unless set), ``maxSequenceJobQueueSize``
    (``sequence_queue``; TorchServe's 1 unless set) and ``maxNumSequence`` (``max_sequences``;
    0, no cap, unless set: a sequence holds no worker here, see serving.handler_sequences)."""

    batch_size: int = 0
    max_delay_s: float = 0.0
    sequences: bool = False
    sequence_idle_s: float = 60.0
    sequence_queue: int = 1
    max_sequences: int = 0


def frontend_batching(manifest: Manifest, model_dir: Path) -> FrontendBatching:
    if not manifest.config_file:
        return FrontendBatching()
    import yaml

    document = yaml.safe_load((model_dir / manifest.config_file).read_bytes()) or {}
    if not isinstance(document, dict):
        return FrontendBatching()
    size, delay = document.get("batchSize"), document.get("maxBatchDelay")
    sequences = _sequences(document)
    if not isinstance(size, int) or size < 1:
        return FrontendBatching(0, 0.0, *sequences)
    delay_ms = (
        delay if isinstance(delay, int | float) and delay >= 0 else DEFAULT_MAX_BATCH_DELAY_MS
    )
    return FrontendBatching(size, delay_ms / 1000, *sequences)


def _sequences(document: dict[str, Any]) -> tuple[bool, float, int, int]:
    """sequenceBatching, sequenceMaxIdleMSec (s), maxSequenceJobQueueSize, maxNumSequence;
    a value that is not a positive integer keeps its default, as TorchServe warns and does."""

    def positive(name: str, default: int) -> int:
        value = document.get(name)
        return (
            value
            if isinstance(value, int) and not isinstance(value, bool) and value > 0
            else default
        )

    return (
        document.get("sequenceBatching") is True,
        positive("sequenceMaxIdleMSec", 60_000) / 1000,
        positive("maxSequenceJobQueueSize", 1),
        positive("maxNumSequence", 0),
    )
