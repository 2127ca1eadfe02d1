"""``lambdaserve dev --model-repository DIR``: a local folder mirrored into the model bucket.

The folder is in Triton's repository layout (``<model>/config.pbtxt``,
``<model>/<version>/model.onnx``, ...). It is uploaded at start and watched: files added,
changed or deleted there are put or deleted in the bucket, and the bucket's events take the
same path to the manage handler as any upload. The embedded emulator keeps nothing across
restarts; the folder is what survives (with the catalog's own facts: ``catalog_state``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lambdaserve.serving.residency.progress import human_bytes

logger = logging.getLogger(__name__)

_IGNORED_PARTS = (".git", "__pycache__", ".ipynb_checkpoints")
_IGNORED_SUFFIXES = ("~", ".swp", ".tmp", ".part", ".DS_Store")


@dataclass(frozen=True)
class SyncResult:
    uploaded: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    settling: tuple[str, ...] = ()  # still being written: synced on a later pass


class RepositoryMirror:
    """Keeps ``models/<model>/...`` in the bucket equal to the folder, model by model."""

    def __init__(
        self, root: Path, s3: Any, bucket: str, prefix: str = "models/", settle_s: float = 0.5
    ) -> None:
        self.root = root.resolve()
        self._s3 = s3
        self._bucket = bucket
        self._prefix = prefix
        self._settle_s = settle_s
        self._models: set[str] = set()  # every model the folder held during this run
        self._lock = threading.Lock()
        self._digests: dict[tuple[str, int, int], str] = {}  # (path, size, mtime) -> md5
        self.resync_s = 5.0

    def sync(self) -> SyncResult:
        """One pass: upload what is new or changed, delete what the folder no longer has."""
        with self._lock:
            local = self._local_files()
            self._models |= {path.split("/", 1)[0] for path in local}
            remote = self._remote_objects()
            uploaded, settling = [], []
            now = time.time()
            # Configs first, so the versions that follow validate against them.
            for path in sorted(local, key=lambda p: (p.count("/") > 1, p)):
                file = self.root / path
                stat = file.stat()
                if now - stat.st_mtime < self._settle_s:
                    settling.append(path)
                    continue
                if self._same(file, stat, remote.get(self._prefix + path)):
                    continue
                self._s3.upload_file(str(file), self._bucket, self._prefix + path)
                logger.info("published %s%s (%s)", self._prefix, path, human_bytes(stat.st_size))
                uploaded.append(path)
            deleted = []
            for key in sorted(remote):
                path = key[len(self._prefix) :]
                if path.split("/", 1)[0] in self._models and path not in local:
                    self._s3.delete_object(Bucket=self._bucket, Key=key)
                    logger.info("retired %s (deleted from the folder)", key)
                    deleted.append(path)
            return SyncResult(tuple(uploaded), tuple(deleted), tuple(settling))

    def watch(self, stop: threading.Event) -> None:
        """Sync on every change in the folder, and every few seconds regardless (a change
        made before the watch was armed, or on a file system without notifications, is
        never missed), until ``stop`` is set."""
        from watchfiles import watch

        for _ in watch(
            self.root,
            stop_event=stop,
            debounce=300,
            step=100,
            rust_timeout=int(self.resync_s * 1000),
            yield_on_timeout=True,
        ):
            try:
                result = self.sync()
                while result.settling and not stop.is_set():
                    stop.wait(self._settle_s)
                    result = self.sync()
            except Exception:
                logger.exception("syncing %s failed; retrying on the next change", self.root)

    def start(self) -> tuple[threading.Thread, threading.Event]:
        stop = threading.Event()
        thread = threading.Thread(target=self.watch, args=(stop,), name="mirror", daemon=True)
        thread.start()
        return thread, stop

    def _same(self, file: Path, stat: os.stat_result, remote: tuple[int, str] | None) -> bool:
        if remote is None or remote[0] != stat.st_size:
            return False
        etag = remote[1]
        if "-" in etag:  # a multipart upload's ETag is no MD5 of the content: size must do
            return True
        key = (str(file), stat.st_size, stat.st_mtime_ns)
        if key not in self._digests:
            digest = hashlib.md5(usedforsecurity=False)
            with file.open("rb") as handle:
                while chunk := handle.read(1024 * 1024):
                    digest.update(chunk)
            self._digests[key] = digest.hexdigest()
        return self._digests[key] == etag

    def _local_files(self) -> dict[str, int]:
        files = {}
        for file in self.root.rglob("*"):
            relative = file.relative_to(self.root)
            if not file.is_file() or _ignored(relative):
                continue
            files[relative.as_posix()] = file.stat().st_size
        return files

    def _remote_objects(self) -> dict[str, tuple[int, str]]:
        objects = {}
        paginator = self._s3.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self._bucket, Prefix=self._prefix):
            for item in page.get("Contents", []):
                objects[item["Key"]] = (int(item["Size"]), str(item["ETag"]).strip('"'))
        return objects


def _ignored(relative: Path) -> bool:
    return any(
        part.startswith(".") or part in _IGNORED_PARTS for part in relative.parts
    ) or relative.name.endswith(_IGNORED_SUFFIXES)
