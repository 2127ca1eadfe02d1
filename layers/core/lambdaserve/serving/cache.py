"""Local artifact cache: model files from S3 on local disk, keyed by content.

Layout under the root (``/tmp/lambdaserve/cache`` in Lambda)::

    blobs/<sha256>              one file per distinct content, verified after download
    views/<view id>/<path>      a version directory: hard links to blobs at their paths

Downloads go to a temporary name and are renamed only after their sha256 matches the
catalog, so a crash mid-download never leaves a servable half file. File locks make
it safe across threads and processes; eviction is least-recently-used by bytes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from lambdaserve.catalog.repository import file_sha256
from lambdaserve.errors import ModelNotReady
from lambdaserve.serving.residency.progress import human_bytes

logger = logging.getLogger(__name__)

_COMPLETE = ".complete"
_MANIFEST = ".manifest.json"

Fetch = Callable[[str, Path], None]


@dataclass(frozen=True)
class CachedFile:
    """One file of a version: where it sits in the version, where it comes from, its digest."""

    path: str
    key: str
    sha256: str
    size: int


class ArtifactCache:
    """Materializes version directories from content-addressed, verified blobs."""

    def __init__(self, root: Path, budget_bytes: int, fetch: Fetch) -> None:
        self.root = root
        self.budget_bytes = budget_bytes
        self._fetch = fetch
        self._blobs = root / "blobs"
        self._views = root / "views"
        self._blobs.mkdir(parents=True, exist_ok=True)
        self._views.mkdir(parents=True, exist_ok=True)
        self._verified: set[str] = set()
        self._verified_lock = threading.Lock()
        self.downloads = 0
        self.clean_leftovers()

    def clean_leftovers(self) -> int:
        """Remove partial downloads and staging views that a killed process left behind.

        A writer holds its blob's (or view's) lock for as long as its temporary exists, so a
        temporary whose lock is free has no writer. Returns the bytes freed.
        """
        freed = 0
        # boto3 downloads ``x.part`` through ``x.part.<8 characters>``: both may be left
        for partial in self._blobs.glob("*.part*"):
            sha256 = partial.name.split(".", 1)[0]
            freed += _remove_unlocked(partial, self._blobs / f"{sha256}.lock")
        for staging in self._views.glob("*.tmp"):
            view_id = staging.name.split(".", 1)[0]
            freed += _remove_unlocked(staging, self._views / f"{view_id}.lock")
        if freed:
            logger.info("removed %d bytes left by an interrupted download", freed)
        return freed

    def materialize(self, files: Sequence[CachedFile]) -> Path:
        """A directory holding ``files`` at their relative paths, each verified."""
        for item in files:
            self._ensure_blob(item)
        view = self._ensure_view(files)
        self.evict(keep={item.sha256 for item in files})
        return view

    def has_blob(self, sha256: str) -> bool:
        """Whether content with this digest is cached (verified or not yet)."""
        return (self._blobs / sha256).exists()

    def bytes_used(self) -> int:
        return sum(p.stat().st_size for p in self._blob_files())

    def evict(self, keep: set[str] | frozenset[str] = frozenset()) -> None:
        """Delete least-recently-used blobs (and views using them) until within budget."""
        with FileLock(str(self.root / ".evict.lock")):
            blobs = sorted(self._blob_files(), key=lambda p: p.stat().st_mtime)
            total = sum(p.stat().st_size for p in blobs)
            for blob in blobs:
                if total <= self.budget_bytes:
                    return
                if blob.name in keep:
                    continue
                self._drop_views_using(blob.name)
                total -= blob.stat().st_size
                blob.unlink(missing_ok=True)
                with self._verified_lock:
                    self._verified.discard(blob.name)
                logger.info("evicted %s from the model cache", blob.name)

    def _ensure_blob(self, item: CachedFile) -> Path:
        blob = self._blobs / item.sha256
        with FileLock(str(blob) + ".lock"):
            if blob.exists() and self._is_verified(blob, item.sha256):
                os.utime(blob)
                return blob
            if blob.exists():
                logger.warning("cached %s does not match its sha256; fetching again", item.path)
                self._drop_views_using(item.sha256)
                blob.unlink()
            for _ in range(2):
                partial = blob.with_name(f"{item.sha256}.{uuid.uuid4().hex}.part")
                try:
                    started = time.perf_counter()
                    self._fetch(item.key, partial)
                    self.downloads += 1
                    seconds = max(time.perf_counter() - started, 1e-6)
                    logger.info(
                        "downloaded %s (%s) in %.2f s (%s/s)",
                        item.key,
                        human_bytes(item.size),
                        seconds,
                        human_bytes(item.size / seconds),
                    )
                    if file_sha256(partial) == item.sha256:
                        os.replace(partial, blob)
                        with self._verified_lock:
                            self._verified.add(item.sha256)
                        self._remove_orphans_of(item.sha256)
                        return blob
                finally:
                    partial.unlink(missing_ok=True)
        raise ModelNotReady(
            f"{item.key} changed since it was validated (sha256 differs); the catalog "
            "revalidates it from the repository event, retry shortly"
        )

    def _remove_orphans_of(self, sha256: str) -> None:
        """Partial downloads of a blob now complete: their writers are gone (this one holds
        the blob's lock), killed before they could clean up."""
        for orphan in self._blobs.glob(f"{sha256}.*.part*"):
            logger.info("removed %s, left by an interrupted download", orphan.name)
            orphan.unlink(missing_ok=True)

    def _is_verified(self, blob: Path, sha256: str) -> bool:
        with self._verified_lock:
            if sha256 in self._verified:
                return True
        # First use in this process: hash once, whatever another process wrote.
        if file_sha256(blob) != sha256:
            return False
        with self._verified_lock:
            self._verified.add(sha256)
        return True

    def _ensure_view(self, files: Sequence[CachedFile]) -> Path:
        manifest = sorted((item.path, item.sha256) for item in files)
        view_id = hashlib.sha256(json.dumps(manifest).encode()).hexdigest()[:32]
        view = self._views / view_id
        if (view / _COMPLETE).exists():
            return view
        with FileLock(str(view) + ".lock"):
            if (view / _COMPLETE).exists():
                return view
            staging = self._views / f"{view_id}.{uuid.uuid4().hex}.tmp"
            staging.mkdir(parents=True)  # an ensemble's version has no files at all
            for path, sha256 in manifest:
                target = staging / path
                target.parent.mkdir(parents=True, exist_ok=True)
                _link_or_copy(self._blobs / sha256, target)
            (staging / _MANIFEST).write_text(json.dumps([sha for _, sha in manifest]))
            (staging / _COMPLETE).touch()
            shutil.rmtree(view, ignore_errors=True)
            os.rename(staging, view)
        return view

    def _drop_views_using(self, sha256: str) -> None:
        for manifest in self._views.glob(f"*/{_MANIFEST}"):
            try:
                used = json.loads(manifest.read_text())
            except (OSError, ValueError):
                used = [sha256]
            if sha256 in used:
                shutil.rmtree(manifest.parent, ignore_errors=True)

    def _blob_files(self) -> list[Path]:
        return [p for p in self._blobs.iterdir() if "." not in p.name]


def _remove_unlocked(path: Path, lock_path: Path) -> int:
    try:
        with FileLock(str(lock_path), timeout=0):
            size = _size(path)
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            return size
    except Timeout:
        return 0  # a live writer holds it


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
