"""One delivery of repository events: which versions and models to reconcile, once each;
archives and misplaced files go to the uploads."""

from __future__ import annotations

import logging
from pathlib import Path

from lambdaserve.catalog.repository import ArchiveKey, ConfigKey, parse_key
from lambdaserve.config.model_files import ALIASES, MODEL_FILES
from lambdaserve.protocol.names import is_valid_model_name
from lambdaserve.publishing.registrar import Registrar
from lambdaserve.publishing.uploads import UploadPublisher
from lambdaserve.publishing.version_archives import is_packed_archive

logger = logging.getLogger(__name__)


class EventBatch:
    """Reconciles each target at most once per delivery.

    Every event in a batch was emitted before the batch was received, so one
    reconcile after receiving sees everything any of them announces: duplicates and
    bursts for the same version (or model) cost one reconcile, not one each.
    """

    def __init__(self, registrar: Registrar, uploads: UploadPublisher) -> None:
        self._registrar = registrar
        self._uploads = uploads
        self._models: set[str] = set()
        self._versions: set[tuple[str, int]] = set()

    def on_object_event(self, key: str) -> None:
        prefix = self._uploads.prefix
        parsed = parse_key(key, prefix)
        if isinstance(parsed, ArchiveKey):
            self._uploads.publish_archive(key, parsed.filename)
            return
        if parsed is None:
            logger.warning("ignoring %s: %s", key, layout_advice(key, prefix))
            return
        if isinstance(parsed, ConfigKey) and parsed.filename in MODEL_FILES:
            self._uploads.misplaced(key, parsed.model, parsed.filename)
        if parsed.model in self._models:
            return
        if isinstance(parsed, ConfigKey):
            self._registrar.reconcile_model(parsed.model)
            self._models.add(parsed.model)
            return
        if is_packed_archive(parsed.path) and self._uploads.unpack_in_version(
            key, parsed.model, parsed.version, parsed.path
        ):
            self._versions.add((parsed.model, parsed.version))  # refused: its reason stands
        if (parsed.model, parsed.version) not in self._versions:
            self._registrar.on_version_change(parsed.model, parsed.version)
            self._versions.add((parsed.model, parsed.version))


def layout_advice(key: str, prefix: str) -> str:
    """Where a key outside the layout would be read: ``models/<model>/<version>/<file>``."""
    parts = key[len(prefix) :].split("/") if key.startswith(prefix) else []
    if len(parts) == 1 and parts[0]:
        stem = parts[0].rsplit(".", 1)[0]
        model = stem if is_valid_model_name(stem) and parts[0] not in MODEL_FILES else "<model>"
        filename = ALIASES.get(Path(parts[0]).suffix, parts[0])
        return (
            f"a model's files go in a version directory, e.g. {prefix}{model}/1/{filename} "
            "(archives: .mar, .tar.gz, .war)"
        )
    if len(parts) >= 3 and is_valid_model_name(parts[0]):
        digits = "".join(c for c in parts[1] if c.isdigit()).lstrip("0") or "1"
        return (
            f"version directories are numbers ({parts[1]!r} is not): upload it as "
            f"{prefix}{parts[0]}/{digits}/{'/'.join(parts[2:])}"
        )
    return f"outside the {prefix}<model>/<version>/ layout"


# What a key holding model code (or an archive of it) ends with
_CODE_ENDINGS = (".py", ".mar", ".war", ".tar.gz", ".tgz", ".zip", "requirements.txt", ".yml")


def is_model_code_key(key: str) -> bool:
    """Whether ``key`` is (or may unpack into) model code, checked where it serves."""
    return key.endswith(_CODE_ENDINGS)
