"""Version labels the publishing side gives: an archive's ``modelVersion`` on its version once
it serves (never before), and ``N.0`` on a validated handler folder, as TorchServe's clients
call them. Written by the registrar (after a validation, after the policy is applied), the
uploads (after an archive's publish) and the management API (after a load)."""

from __future__ import annotations

import logging

import orjson

from lambdaserve.catalog import version_policy
from lambdaserve.catalog.items import VersionRecord
from lambdaserve.catalog.repository import ModelRepository
from lambdaserve.catalog.store import Catalog
from lambdaserve.config.model_files import HANDLER_FILE, MANIFEST_FILE
from lambdaserve.publishing.watchers import ModelWatchers

logger = logging.getLogger(__name__)


class VersionLabels:
    """Labels versions in the catalog; tells the watchers of each label it gives."""

    def __init__(
        self, repository: ModelRepository, catalog: Catalog, watchers: ModelWatchers
    ) -> None:
        self._repository = repository
        self._catalog = catalog
        self._watchers = watchers

    def label_recovered_archives(self, model: str) -> None:
        """Archive versions READY without their ``modelVersion`` label (their load failed at
        publish and a later load succeeded) get it, as their publish would have given it."""
        record = self._catalog.get_model(model)
        labels = record.version_labels if record else {}
        labelled = set(labels.values())
        for version in self._catalog.versions(model):
            if version.model_file != MANIFEST_FILE or version.version in labelled:
                continue
            manifest = self._repository.read_model_file(
                model, f"{version.version}/{MANIFEST_FILE}", 1024**2
            )
            try:
                label = orjson.loads(manifest or b"{}").get("model", {}).get("modelVersion")
            except (orjson.JSONDecodeError, AttributeError):
                continue
            if isinstance(label, str) and label and label not in labels:  # never moved back
                self.label_archive(model, version.version, label)

    def label_handler_folder(self, model: str, version: VersionRecord) -> None:
        """A validated handler folder (``models/m/N/handler.py``) is also ``N.0``, the version
        torch-model-archiver gives by default: TorchServe's clients call it as they would its
        ``.mar``. Labelled before its state is derived, so READY never shows without it (an
        archive's label waits for READY: it may move; ``N.0`` only ever names N). A label
        already in use (an archive's ``modelVersion``) is never taken."""
        if version.model_file != HANDLER_FILE or not version.valid:
            return
        label = f"{version.version}.0"
        record = self._catalog.get_model(model)
        if record is None or label in record.version_labels:
            return
        labels = {**record.version_labels, label: version.version}
        self._catalog.update_model(model, version_labels=labels)
        logger.info("%s version %s is labelled %s", model, version.version, label)

    def label_archive(self, model: str, version: int, label: str) -> None:
        """The archive's ``modelVersion`` on its version, once it serves (never before). The
        serving side of this process hears of it at once, as it heard of the READY before it."""
        record = self._catalog.get_version(model, version)
        if label and record is not None and record.state == version_policy.READY:
            current = self._catalog.get_model(model)
            labels = {**(current.version_labels if current else {}), label: version}
            self._catalog.update_model(model, version_labels=labels)
            logger.info("%s version %s is labelled %s", model, version, label)
            self._watchers.tell(model)
