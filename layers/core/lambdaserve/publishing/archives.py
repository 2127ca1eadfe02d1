"""TorchServe's archives published by upload: ``models/mnist.mar`` (torch-model-archiver's
zip, or ``--archive-format tgz``) becomes a version directory of the model its manifest
names, and the manifest's ``modelVersion`` ("1.0") a label on that version, as TorchServe
addresses versions (``/predictions/mnist/1.0``).

The archive is read as untrusted input: members must be regular files at relative paths
inside it (no ``..``, no absolute paths, no links or devices), within a count and size
budget, each decompressed no further than its declared size (zip bombs stop there). Nothing
in it runs here; the handler is only read, where it serves it runs.
"""

from __future__ import annotations

import hashlib
import logging
import tarfile
import tempfile
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

import orjson

from lambdaserve.catalog.items import VersionRecord
from lambdaserve.catalog.repository import ARCHIVE_SUFFIXES, ModelRepository
from lambdaserve.catalog.store import Catalog
from lambdaserve.config.model_files import MANIFEST_FILE, WORKFLOW_MANIFEST_FILE
from lambdaserve.errors import ModelRejected
from lambdaserve.protocol.names import is_valid_model_name

logger = logging.getLogger(__name__)

MAX_MEMBERS = 10_000
MAX_UNPACKED_BYTES = 8 * 1024**3
# A member may expand this many times its compressed size (models compress ~1-3x; bombs 1000x)
MAX_RATIO = 200
_RATIO_FLOOR = 1024**2  # small members (configs, JSON) may compress better than that
ARCHIVE_ETAG = "lambdaserve-archive-etag"


@dataclass(frozen=True)
class Member:
    path: str
    size: int
    open: Callable[[], IO[bytes]]


@dataclass(frozen=True)
class Published:
    model: str
    version: int
    label: str
    fresh: bool


def archive_stem(filename: str) -> str:
    for suffix in ARCHIVE_SUFFIXES:
        if filename.endswith(suffix):
            return filename[: -len(suffix)]
    return filename


def publish_archive(
    repository: ModelRepository, catalog: Catalog, key: str, filename: str
) -> Published:
    """Unpack the uploaded archive into the next version directory of its model (or find
    the one an earlier delivery of the same upload made). ModelRejected says what is wrong."""
    head = repository.head(key)
    if head is None:
        raise FileNotFoundError(key)
    with tempfile.TemporaryDirectory(prefix="archive-") as scratch:
        local = Path(scratch) / "archive"
        repository.download(key, str(local))
        with _members(local, filename, local.stat().st_size) as members:
            manifest = _manifest(members, filename)
            model = manifest["modelName"]
            label = manifest["modelVersion"]
            existing = _version_of_upload(repository, model, head.etag)
            if existing is not None:
                return Published(model, existing, label, fresh=False)
            version = _number_of(members, catalog, model) or (
                max([*repository.versions(model), *_catalog_versions(catalog, model), 0]) + 1
            )
            prefix = f"{repository.prefix}{model}/{version}/"
            for member in members.values():
                if member.path in (MANIFEST_FILE, WORKFLOW_MANIFEST_FILE):
                    continue
                with member.open() as body:
                    repository.put(prefix + member.path, _Bounded(body, member))
            # The manifest last, marked with the upload it came from: once it is there the
            # version is whole, and a redelivered event finds it instead of unpacking again.
            manifest_file = _manifest_file(members)
            with members[manifest_file].open() as body:
                repository.put(prefix + manifest_file, body, {ARCHIVE_ETAG: head.etag})
    logger.info("unpacked %s into %s (modelVersion %s)", key, prefix, label)
    return Published(model, version, label, fresh=True)


def rejected_archive(catalog: Catalog, model: str, filename: str, reason: str) -> VersionRecord:
    """The catalog's record of an archive that could not be published: a version of the
    model with no objects, UNAVAILABLE with the reason, so the index shows it."""
    said = f"archive {filename}: {reason}"
    versions = catalog.versions(model)
    again = [v.version for v in versions if not v.present and v.reason == said]
    # a redelivered event finds the record it made before
    version = again[0] if again else max([v.version for v in versions] + [0]) + 1
    logger.info("archive %s rejected: %s", filename, reason, extra={"model": model})
    return VersionRecord(
        model=model,
        version=version,
        present=False,
        state="UNAVAILABLE",
        reason=said,
        validation_error=said,
        observed_at=time.time_ns(),
    )


def _number_of(members: dict[str, Member], catalog: Catalog, model: str) -> int | None:
    """The number this very archive had before (a version kept across ``dev`` restarts,
    whose files are not in the bucket yet), keyed by its manifest's digest."""
    with members[_manifest_file(members)].open() as body:
        digest = hashlib.sha256(body.read()).hexdigest()
    kept = [v.version for v in catalog.versions(model) if not v.present and v.sha256 == digest]
    return kept[0] if kept else None


def _catalog_versions(catalog: Catalog, model: str) -> list[int]:
    return [v.version for v in catalog.versions(model)]


def _version_of_upload(repository: ModelRepository, model: str, etag: str) -> int | None:
    for version in reversed(repository.versions(model)):
        for manifest in (MANIFEST_FILE, WORKFLOW_MANIFEST_FILE):
            key = f"{repository.prefix}{model}/{version}/{manifest}"
            if repository.metadata(key).get(ARCHIVE_ETAG) == etag:
                return version
    return None


def _manifest_file(members: dict[str, Member]) -> str:
    return WORKFLOW_MANIFEST_FILE if WORKFLOW_MANIFEST_FILE in members else MANIFEST_FILE


def _manifest(members: dict[str, Member], filename: str) -> dict[str, str]:
    manifest_file = _manifest_file(members)
    if manifest_file not in members:
        raise ModelRejected(
            f"{filename} has no {MANIFEST_FILE}: build it with torch-model-archiver "
            "(--archive-format default or tgz), or a workflow with torch-workflow-archiver"
        )
    with members[manifest_file].open() as body:
        raw = body.read(1024**2 + 1)
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ModelRejected(f"{manifest_file} is not JSON: {exc}") from None
    if manifest_file == WORKFLOW_MANIFEST_FILE:
        return _workflow_manifest(document, members)
    model = document.get("model") if isinstance(document, dict) else None
    if not isinstance(model, dict):
        raise ModelRejected(f'{MANIFEST_FILE} has no "model" object')
    name = model.get("modelName")
    if not isinstance(name, str) or not is_valid_model_name(name):
        raise ModelRejected(f"{MANIFEST_FILE} names no valid modelName (got {name!r})")
    label = model.get("modelVersion") or "1.0"
    named = [model.get(k) for k in ("serializedFile", "modelFile", "configFile")]
    handler = str(model.get("handler") or "").split(":", 1)[0]
    if handler.endswith(".py"):
        named.append(handler)
    for path in named:
        if isinstance(path, str) and path and path not in members:
            raise ModelRejected(
                f"{MANIFEST_FILE} names {path!r}, which the archive does not contain"
            )
    return {"modelName": name, "modelVersion": str(label)}


def _workflow_manifest(document: Any, members: dict[str, Member]) -> dict[str, str]:
    workflow = document.get("workflow") if isinstance(document, dict) else None
    if not isinstance(workflow, dict):
        raise ModelRejected(f'{WORKFLOW_MANIFEST_FILE} has no "workflow" object')
    name = workflow.get("workflowName")
    if not isinstance(name, str) or not is_valid_model_name(name):
        raise ModelRejected(f"{WORKFLOW_MANIFEST_FILE} names no valid workflowName ({name!r})")
    for path in (workflow.get("specFile"), workflow.get("handler")):
        if isinstance(path, str) and path and path not in members:
            raise ModelRejected(
                f"{WORKFLOW_MANIFEST_FILE} names {path!r}, which the archive does not contain"
            )
    return {"modelName": name, "modelVersion": ""}


@contextmanager
def _members(local: Path, filename: str, packed: int) -> Iterator[dict[str, Member]]:
    if zipfile.is_zipfile(local):
        with zipfile.ZipFile(local) as archive:
            yield _checked(_zip_members(archive), filename, packed)
        return
    try:
        with tarfile.open(local, "r:*") as archive:
            yield _checked(_tar_members(archive), filename, packed)
    except (tarfile.TarError, EOFError, zlib.error):  # tarfile's own attempts say nothing more
        raise ModelRejected(
            f"{filename} is not a model archive: it is {_what_it_is(local)}. Build it again "
            "with torch-model-archiver --model-name <name> --version 1.0 --handler <handler> "
            "[--serialized-file <weights>] --export-path <dir> (a .mar is a zip; "
            "--archive-format tgz makes a tar.gz), and upload the file as it wrote it"
        ) from None


_MAGIC = (
    (b"PK", "a damaged zip (cut short, or changed on the way: upload it again)"),
    (b"\x1f\x8b", "a damaged gzip (cut short, or changed on the way: upload it again)"),
    (b"<", "text that looks like an HTML or XML page (a download that saved an error page?)"),
    (b"{", "JSON text, not an archive"),
    (b"version https://git-lfs", "a Git LFS pointer, not the file (run git lfs pull)"),
)


def _what_it_is(local: Path) -> str:
    """What the bytes look like, for a refusal a person can act on."""
    with local.open("rb") as body:
        head = body.read(64)
    for magic, words in _MAGIC:
        if head.lstrip().startswith(magic):
            return words
    return f"{local.stat().st_size} bytes of neither zip nor tar (they start {head[:8]!r})"


def _zip_members(archive: zipfile.ZipFile) -> Iterator[tuple[str, int, int, Callable[[], Any]]]:
    for info in archive.infolist():
        if info.is_dir():
            continue
        mode = info.external_attr >> 16
        if mode and (mode & 0o170000) not in (0, 0o100000):
            raise _not_a_file(info.filename)
        yield info.filename, info.file_size, info.compress_size, _opener(archive, info)


def _opener(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> Callable[[], IO[bytes]]:
    return lambda: archive.open(info)


def _not_a_file(name: str) -> ModelRejected:
    return ModelRejected(
        f"{name!r} is a link or special file; archives may hold regular files only"
    )


def _tar_members(archive: tarfile.TarFile) -> Iterator[tuple[str, int, int, Callable[[], Any]]]:
    for info in archive.getmembers():
        if info.isdir():
            continue
        if not info.isreg():
            raise _not_a_file(info.name)
        yield info.name, info.size, info.size, _tar_opener(archive, info)


def _tar_opener(archive: tarfile.TarFile, info: tarfile.TarInfo) -> Callable[[], IO[bytes]]:
    def open_member() -> IO[bytes]:
        extracted = archive.extractfile(info)
        if extracted is None:
            raise ModelRejected(f"{info.name!r} cannot be read from the archive")
        return extracted

    return open_member


def _checked(
    entries: Iterator[tuple[str, int, int, Callable[[], Any]]], filename: str, packed: int
) -> dict[str, Member]:
    members: dict[str, Member] = {}
    total = 0
    for name, size, compressed, opener in entries:
        path = _relative(name)
        if path in members:
            raise ModelRejected(f"{filename} holds {path!r} twice")
        if len(members) >= MAX_MEMBERS:
            raise ModelRejected(f"{filename} holds more than {MAX_MEMBERS} files")
        if size > _RATIO_FLOOR and size > MAX_RATIO * max(compressed, 1):
            raise ModelRejected(
                f"{path!r} expands {size // max(compressed, 1)}x ({size} bytes): refused as "
                "a decompression bomb"
            )
        total += size
        if total > _RATIO_FLOOR and total > MAX_RATIO * max(packed, 1):
            raise ModelRejected(
                f"{filename} expands {total // max(packed, 1)}x ({total} bytes): refused as a "
                "decompression bomb"
            )
        if total > MAX_UNPACKED_BYTES:
            raise ModelRejected(
                f"{filename} unpacks to more than {MAX_UNPACKED_BYTES} bytes; publish the "
                "model's files into a version directory instead"
            )
        members[path] = Member(path, size, opener)
    return _without_top_folder(members)


def _without_top_folder(members: dict[str, Member]) -> dict[str, Member]:
    """``--archive-format tgz`` packs the files under a ``<model-name>/`` folder."""
    tops = {path.split("/", 1)[0] for path in members}
    if (
        MANIFEST_FILE in members
        or WORKFLOW_MANIFEST_FILE in members
        or len(tops) != 1
        or "/" not in next(iter(members), "")
    ):
        return members
    top = tops.pop() + "/"
    return {p[len(top) :]: Member(p[len(top) :], m.size, m.open) for p, m in members.items()}


def _relative(name: str) -> str:
    """The member's path inside the version directory, or ModelRejected for one that would
    land outside it."""
    path = PurePosixPath(name.replace("\\", "/"))
    parts = [p for p in path.parts if p not in ("", ".")]
    if path.is_absolute() or not parts or ".." in parts or ":" in parts[0]:
        raise ModelRejected(f"archive member {name!r} points outside the archive")
    return "/".join(parts)


class _Bounded:
    """A member's bytes as read, never more than its declared size (a lying header stops)."""

    def __init__(self, body: IO[bytes], member: Member) -> None:
        self._body = body
        self._member = member
        self._read = 0

    def read(self, size: int = -1) -> bytes:
        chunk = self._body.read(size)
        self._read += len(chunk)
        if self._read > self._member.size:
            raise ModelRejected(f"{self._member.path!r} holds more bytes than the archive declares")
        return chunk
