"""A TorchServe archive dropped into a version directory (``models/m/1/m.mar``, Triton's
habit of one directory per version): unpacked in place, so it serves as that version.

The directory decides the model and version, as for every other file there; the archive's
``modelName`` and ``modelVersion`` stay in its manifest, which the handler sees as
``context.manifest``. Read as untrusted input with the same checks as an archive uploaded
beside the models (``archives``); the manifest is written last, marked with the upload it
came from, so a redelivered event finds the version whole and unpacks nothing again.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from lambdaserve.catalog.repository import ModelRepository
from lambdaserve.config.model_files import MANIFEST_FILE, WORKFLOW_MANIFEST_FILE
from lambdaserve.publishing.archives import (
    ARCHIVE_ETAG,
    _Bounded,
    _manifest,
    _manifest_file,
    _members,
)

logger = logging.getLogger(__name__)
# What TorchServe's archivers write; a .tar.gz in a version directory may be anything else.
PACKED_SUFFIXES = (".mar", ".war")


def is_packed_archive(path: str) -> bool:
    """A file at a version directory's top whose name says it is a TorchServe archive."""
    return "/" not in path and path.endswith(PACKED_SUFFIXES)


def unpack_in_version(repository: ModelRepository, key: str, model: str, version: int) -> bool:
    """Unpack the archive at ``key`` into its own version directory; False when that upload
    is already unpacked there (or gone). ModelRejected says what is wrong with it."""
    head = repository.head(key)
    if head is None:
        return False
    prefix = f"{repository.prefix}{model}/{version}/"
    for manifest in (MANIFEST_FILE, WORKFLOW_MANIFEST_FILE):
        if repository.metadata(prefix + manifest).get(ARCHIVE_ETAG) == head.etag:
            return False
    filename = key.rsplit("/", 1)[-1]
    with tempfile.TemporaryDirectory(prefix="archive-") as scratch:
        local = Path(scratch) / "archive"
        repository.download(key, str(local))
        with _members(local, filename, local.stat().st_size) as members:
            _manifest(members, filename)  # it is an archive TorchServe would load
            manifest_file = _manifest_file(members)
            for member in members.values():
                if member.path in (MANIFEST_FILE, WORKFLOW_MANIFEST_FILE):
                    continue
                with member.open() as body:
                    repository.put(prefix + member.path, _Bounded(body, member))
            with members[manifest_file].open() as body:
                repository.put(prefix + manifest_file, body, {ARCHIVE_ETAG: head.etag})
    logger.info("unpacked %s into %s", key, prefix)
    return True
