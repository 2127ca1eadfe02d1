"""A version's Python environment where it serves: its tarball comes with the version's files
(the model file cache: by sha256, verified, counted in the cache budget, LRU), and is
unpacked once per digest, checked, beside the cache.

``EnvironmentDirectories`` is the ``EnvironmentPaths`` hook a worker spawn asks for the
directories to put first on the worker's ``sys.path``: ``(model, version, version_dir)`` ->
the environment's directory, or ``()`` when the version has none.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from pathlib import Path, PurePosixPath
from typing import Any

from filelock import FileLock

from lambdaserve.errors import ModelNotReady
from lambdaserve.serving.cache import ArtifactCache, CachedFile

logger = logging.getLogger(__name__)

# Where a version directory holds its environment's tarball (named by its sha256).
ENVIRONMENT_DIR = ".lambdaserve/environments"
MAX_MEMBERS = 200_000
_COMPLETE = ".complete"


def environment_file(environment: dict[str, Any]) -> CachedFile | None:
    """The catalog's record of a version's environment as one more file of the version."""
    if not environment.get("key") or not environment.get("sha256"):
        return None  # none, or one the image fully provides (nothing stored)
    sha256 = str(environment["sha256"])
    return CachedFile(
        f"{ENVIRONMENT_DIR}/{sha256}.tar.gz",
        str(environment["key"]),
        sha256,
        int(environment["size"]),
    )


class EnvironmentDirectories:
    """Unpacked environments under ``root``, one directory per tarball digest.

    With ``cache`` (the model file cache), an unpacked directory whose tarball the cache
    evicted is removed when another environment is asked for: the tarballs count in the
    cache's budget, and their unpacked copies follow them out.
    """

    def __init__(self, root: Path, cache: ArtifactCache | None = None) -> None:
        self.root = root
        self._cache = cache

    @classmethod
    def beside(cls, cache: ArtifactCache) -> EnvironmentDirectories:
        """The hook for a process's model cache: unpacked next to it (``<work dir>/
        environments`` beside ``<work dir>/cache``), following its evictions."""
        return cls(cache.root.parent / "environments", cache)

    def __call__(self, model: str, version: int, version_dir: Path) -> tuple[Path, ...]:
        tarballs = sorted((version_dir / ENVIRONMENT_DIR).glob("*.tar.gz"))
        if not tarballs:
            return ()
        self.prune(keep=tarballs[0].name.removesuffix(".tar.gz"))
        return (self.unpacked(tarballs[0]),)

    def prune(self, keep: str = "") -> None:
        """Remove unpacked environments whose tarball is no longer in the cache."""
        if self._cache is None or not self.root.is_dir():
            return
        for directory in self.root.iterdir():
            name = directory.name
            if not directory.is_dir() or "." in name or name == keep:
                continue
            if self._cache.has_blob(name):
                continue
            with FileLock(str(directory) + ".lock"):
                shutil.rmtree(directory, ignore_errors=True)
            logger.info("removed environment %s: its tarball left the cache", name[:12])

    def unpacked(self, tarball: Path) -> Path:
        """The directory ``tarball`` unpacks to (once, across threads and processes)."""
        sha256 = tarball.name.removesuffix(".tar.gz")
        directory = self.root / sha256
        if (directory / _COMPLETE).exists():
            return directory
        self.root.mkdir(parents=True, exist_ok=True)
        with FileLock(str(directory) + ".lock"):
            if (directory / _COMPLETE).exists():
                return directory
            staging = self.root / f"{sha256}.{uuid.uuid4().hex}.tmp"
            try:
                _unpack_checked(tarball, staging)
                (staging / _COMPLETE).touch()
                shutil.rmtree(directory, ignore_errors=True)
                os.rename(staging, directory)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        logger.info("unpacked environment %s", sha256[:12])
        return directory


def _unpack_checked(tarball: Path, target: Path) -> None:
    """Regular files and directories at relative paths only (no links, devices, ``..``),
    each at most what its header declares; the tarball's bytes were verified by sha256
    against the catalog, which recorded what the publish sandbox built."""
    import tarfile  # here: only a version with an environment needs it, not every cold start

    target.mkdir(parents=True)
    with tarfile.open(tarball, "r:gz") as archive:
        members = archive.getmembers()
        if len(members) > MAX_MEMBERS:
            raise ModelNotReady(f"environment {tarball.name} holds over {MAX_MEMBERS} entries")
        for member in members:
            path = PurePosixPath(member.name)
            if path.is_absolute() or ".." in path.parts or not (member.isreg() or member.isdir()):
                raise ModelNotReady(
                    f"environment {tarball.name}: {member.name!r} is not a plain file inside it"
                )
        archive.extractall(target, members=members, filter="data")
