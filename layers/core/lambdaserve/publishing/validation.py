"""Validate a published version with the real runtime before it may serve."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from lambdaserve.catalog.repository import (
    ModelRepository,
    ObjectInfo,
    VersionFileKey,
    file_sha256,
    parse_key,
)
from lambdaserve.config.checks import check_platform, check_tensors
from lambdaserve.config.model_config import ModelConfig
from lambdaserve.config.model_files import (
    ALIASES,
    CODE_FILES,
    COMPANIONS,
    MANIFEST_FILE,
    MODEL_FILES,
    WORKFLOW_MANIFEST_FILE,
)
from lambdaserve.config.reshape import client_signature
from lambdaserve.config.runtime_names import OPENVINO_RUNTIME
from lambdaserve.config.warmup_samples import check_samples
from lambdaserve.errors import ModelRejected, RuntimeMissing, first_line
from lambdaserve.publishing.auto_complete import (
    Completer,
    IsolatedProcess,
    apply_completion,
    completed_fields,
    declares_auto_complete,
)
from lambdaserve.publishing.environments.store import Environments, version_environment
from lambdaserve.publishing.version_archives import is_packed_archive
from lambdaserve.runtimes.model_code import DISABLED
from lambdaserve.runtimes.paddle_inference.choice import inspect_choosing
from lambdaserve.runtimes.registry import runtime_for
from lambdaserve.runtimes.tensorflow.choice import inspect_savedmodel
from lambdaserve.serving.residency.progress import TransferProgress, human_bytes
from lambdaserve.serving.residency.warmup import check_warmup
from lambdaserve.tensors.signature import Signature

# Smaller versions validate in well under a second: no progress to tell.
PROGRESS_MIN_BYTES = 16 * 1024 * 1024
_MAX_NAME_BYTES = 255
_MAX_PATH_BYTES = 1024


@dataclass(frozen=True)
class FileRecord:
    path: str
    key: str
    size: int
    etag: str
    sha256: str


@dataclass(frozen=True)
class ValidatedVersion:
    """A version that loaded in its runtime, with what the catalog records of it."""

    runtime: str
    model_file: str
    signature: Signature
    files: tuple[FileRecord, ...]
    notes: str = ""
    # What the model's auto_complete_config filled in (Triton JSON fields)
    completed_config: dict[str, Any] = field(default_factory=dict)
    # The version's Python environment as the catalog records it ({}: none)
    environment: dict[str, Any] = field(default_factory=dict)

    @property
    def sha256(self) -> str:
        return next(f.sha256 for f in self.files if f.path == self.model_file)

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


class VersionValidator:
    """Downloads a version to a scratch directory and loads it in its runtime."""

    def __init__(
        self,
        repository: ModelRepository,
        max_bytes: int,
        work_dir: str,
        *,
        python_models: bool = False,
        completer: Completer | None = None,
        environments: Environments | None = None,
    ) -> None:
        self._repository = repository
        self._max_bytes = max_bytes
        self._work_dir = work_dir
        self._python_models = python_models
        self._completer = completer or IsolatedProcess()
        self._environments = environments

    def validate(
        self,
        objects: list[ObjectInfo],
        config: ModelConfig,
        progress: Callable[[str], None] | None = None,
    ) -> ValidatedVersion:
        """Return what validated, or raise ModelRejected with a reason a person can act on.

        ``progress`` hears what is happening to a large version (sizes, rates) as it goes.
        """
        by_path = _aliased(
            _unpacked(_by_relative_path(objects, self._repository.prefix)),
            config.default_model_filename,
        )
        check_platform(config, by_path)
        model_file = _model_file(by_path)
        notes = _misplaced_configs(by_path, config.name)
        if model_file in CODE_FILES and not self._python_models:
            raise RuntimeMissing(DISABLED)
        total = sum(o.size for o in objects)
        if total > self._max_bytes:
            raise ModelRejected(
                f"version is {total} bytes, over the {self._max_bytes}-byte limit "
                "(LAMBDASERVE_MAX_MODEL_BYTES)"
            )
        for path in by_path:
            _check_path(path)
        Path(self._work_dir).mkdir(parents=True, exist_ok=True)
        report = progress if progress is not None and total >= PROGRESS_MIN_BYTES else None
        with tempfile.TemporaryDirectory(dir=self._work_dir, prefix="validate-") as scratch:
            root = Path(scratch)
            transfer = TransferProgress("downloading", total, report) if report else None
            files = tuple(
                self._fetch(root, path, info, transfer) for path, info in sorted(by_path.items())
            )
            runtime = runtime_for(model_file, config)
            environment = (
                version_environment(
                    self._environments,
                    root,
                    model_file,
                    config,
                    models_prefix=self._repository.prefix,
                    report=report,
                )
                if self._environments is not None
                else {}
            )
            if report and transfer:
                report(transfer.finished())
                report(f"validating {human_bytes(total)} with {runtime.name}")
            try:
                completed = self._auto_complete(root / model_file, config)
                config = apply_completion(config, completed) if completed else config
                runtime, signature, chosen = inspect_savedmodel(
                    runtime, root / model_file, config
                ) or inspect_choosing(runtime, root / model_file, config)
                served = (
                    signatures_served(root / model_file) if runtime.name == OPENVINO_RUNTIME else ""
                )
                notes = "; ".join(n for n in (notes, chosen, served) if n)
                check_tensors(config, signature)
                signature = client_signature(signature, config.reshapes)
                if report:
                    report("checking warm-up samples")
                check_warmup(root, signature)
                check_samples(config.warmup, root, signature, config.max_batch_size > 0)
            except ModelRejected as exc:
                raise type(exc)(scrub(exc.message, root)) from exc
            except (ClientError, BotoCoreError):
                raise  # AWS, not the model (the code validator's invoke): the event retries
            except Exception as exc:  # whatever the runtime or the OS refused in the user's files
                raise ModelRejected(
                    f"{runtime.name} cannot load {model_file}: "
                    f"{scrub(first_line(exc, 500), root)} ({type(exc).__name__})"
                ) from exc
        return ValidatedVersion(
            runtime.name, model_file, signature, files, notes, completed, environment
        )

    def _auto_complete(self, model_file: Path, config: ModelConfig) -> dict[str, Any]:
        """Triton calls a Python model's auto_complete_config before loading it."""
        if model_file.name != "model.py" or not declares_auto_complete(model_file):
            return {}
        returned = self._completer.complete(model_file.read_bytes(), config.to_triton_json())
        return completed_fields(config, returned)

    def _fetch(
        self, root: Path, path: str, info: ObjectInfo, progress: TransferProgress | None
    ) -> FileRecord:
        target = (root / path).resolve()
        if not target.is_relative_to(root.resolve()):
            raise ModelRejected(f"file {path!r} would leave the version directory")
        target.parent.mkdir(parents=True, exist_ok=True)
        self._repository.download(info.key, str(target), progress)
        return FileRecord(path, info.key, target.stat().st_size, info.etag, file_sha256(target))


def scrub(message: str, root: Path) -> str:
    """Say what is wrong with the user's file, not where the server put it."""
    for prefix in {str(root.resolve()), str(root)}:
        message = message.replace(prefix + "/", "").replace(prefix, "<version directory>")
    return message


def _check_path(path: str) -> None:
    """File names any local disk can hold (S3 keys may be longer than a file system allows)."""
    for part in path.split("/"):
        if len(part.encode()) > _MAX_NAME_BYTES:
            raise ModelRejected(
                f"file name {part[:40]!r}... is {len(part.encode())} bytes; file names may have "
                f"at most {_MAX_NAME_BYTES} bytes: rename it"
            )
    if len(path.encode()) > _MAX_PATH_BYTES:
        raise ModelRejected(
            f"path {path[:40]!r}... is {len(path.encode())} bytes; paths inside a version may "
            f"have at most {_MAX_PATH_BYTES} bytes"
        )


def _misplaced_configs(by_path: dict[str, ObjectInfo], model: str) -> str:
    """Triton reads a model's config next to its versions, never inside one."""
    misplaced = sorted(
        p for p in by_path if p.rsplit("/", 1)[-1] in ("config.pbtxt", "config.json")
    )
    return "; ".join(
        f"{path} inside the version directory is ignored: a model's config belongs at "
        f"models/{model}/{path.rsplit('/', 1)[-1]}"
        for path in misplaced
    )


def _by_relative_path(objects: list[ObjectInfo], prefix: str) -> dict[str, ObjectInfo]:
    by_path = {}
    for info in objects:
        parsed = parse_key(info.key, prefix)
        if isinstance(parsed, VersionFileKey):
            by_path[parsed.path] = info
    return by_path


def _unpacked(by_path: dict[str, ObjectInfo]) -> dict[str, ObjectInfo]:
    """A TorchServe archive dropped into the version serves from what it unpacked to: the
    packed file itself is neither downloaded nor loaded where it serves."""
    if MANIFEST_FILE not in by_path and WORKFLOW_MANIFEST_FILE not in by_path:
        return by_path
    return {path: info for path, info in by_path.items() if not is_packed_archive(path)}


def _aliased(by_path: dict[str, ObjectInfo], name: str) -> dict[str, ObjectInfo]:
    """Triton's ``default_model_filename``: the named file is the model, served as the file
    its suffix stands for (``resnet.onnx`` as ``model.onnx``)."""
    if not name:
        return by_path
    suffix = Path(name).suffix
    if suffix not in ALIASES:
        raise ModelRejected(
            f"default_model_filename {name!r}: lambdaserve serves "
            f"{', '.join(sorted(ALIASES))} files under another name; rename the file to one "
            "of model.onnx, model.pt, model.xml, model.pdmodel or model.py instead"
        )
    if name not in by_path:
        raise ModelRejected(
            f"default_model_filename {name!r} names a file the version does not have; "
            f"upload it into the version directory"
        )
    aliased = dict(by_path)
    aliased[ALIASES[suffix]] = aliased.pop(name)
    if suffix in COMPANIONS:
        companion, served = COMPANIONS[suffix]
        beside = str(Path(name).with_suffix(companion))
        if beside in aliased:
            aliased[served] = aliased.pop(beside)
    return aliased


def _model_file(by_path: dict[str, ObjectInfo]) -> str:
    """The file that serves the version. Code (model.py, handler.py) may bring model files
    of its own to load, as Triton's Python models and TorchServe's handlers do."""
    for manifest in (MANIFEST_FILE, WORKFLOW_MANIFEST_FILE):
        if manifest in by_path:
            return manifest  # a TorchServe archive: its manifest names what serves
    present = [name for name in MODEL_FILES if name in by_path]
    if not present:
        raise ModelRejected(_no_model_file(by_path))
    code = [name for name in present if name in CODE_FILES]
    candidates = code or present
    if len(candidates) > 1:
        raise ModelRejected(f"both {' and '.join(candidates)} are present; keep exactly one")
    return candidates[0]


def _no_model_file(by_path: dict[str, ObjectInfo]) -> str:
    packed = sorted(p for p in by_path if is_packed_archive(p))
    if packed:
        return (
            f"{packed[0]} is not unpacked: an archive uploaded into a version directory is "
            "unpacked when its upload is seen; upload it again (the log says why it was not)"
        )
    if "model.json" in by_path and "model.pdiparams" in by_path:
        return (
            "model.json is Paddle 3's PIR format, which OpenVINO cannot read; save the model "
            "with FLAGS_enable_pir_api=0 set before importing paddle, and upload model.pdmodel "
            "with model.pdiparams"
        )
    return (
        "no model file: upload model.onnx (ONNX), model.pt (TorchScript), model.xml with "
        "model.bin (OpenVINO IR), model.savedmodel/ (a TF SavedModel), model.pdmodel with "
        "model.pdiparams or __model__ with its parameters (Paddle), model.py (a Triton "
        "Python model), handler.py (a TorchServe handler), web_service.py with config.yml "
        "(a Paddle Serving pipeline) "
        "or a TorchServe archive (a .mar at models/ or in the version directory, or its files "
        "with MAR-INF/MANIFEST.json) "
        "into the version directory"
    )


def signatures_served(model_file: Path) -> str:
    """A SavedModel's note: the signatures it serves and those it does not."""
    if model_file.name != "saved_model.pb":
        return ""
    from lambdaserve.runtimes.openvino.savedmodel import signature_note

    return signature_note(model_file.read_bytes())
