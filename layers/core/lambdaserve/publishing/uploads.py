"""Uploads outside the version layout, published by the catalog's owner: TorchServe
archives uploaded beside the models (unpacked into versions, labelled once they serve) and
model files uploaded beside the versions (shown with where they belong)."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Protocol

from lambdaserve.catalog import version_policy
from lambdaserve.catalog.items import VersionRecord
from lambdaserve.catalog.repository import ModelRepository
from lambdaserve.catalog.store import Catalog
from lambdaserve.config.model_config import parse_overrides
from lambdaserve.errors import ModelRejected
from lambdaserve.protocol.names import is_valid_model_name
from lambdaserve.publishing.archives import archive_stem, publish_archive, rejected_archive
from lambdaserve.publishing.config_reader import ConfigReader
from lambdaserve.publishing.version_archives import unpack_in_version
from lambdaserve.publishing.version_labels import VersionLabels


class Reconciler(Protocol):
    """What an upload asks of the catalog's reconciler (the ``Registrar``) once written."""

    def apply_policy(self, model: str) -> None: ...

    def on_version_change(self, model: str, version: int) -> None: ...


logger = logging.getLogger(__name__)


class UploadPublisher:
    """Writes what such uploads mean into the catalog, then lets the registrar reconcile.
    Built by the composition root, handed the registrar, the config reader and the labels."""

    def __init__(
        self,
        repository: ModelRepository,
        catalog: Catalog,
        registrar: Reconciler,
        configs: ConfigReader,
        labels: VersionLabels,
    ) -> None:
        self._repository = repository
        self._catalog = catalog
        self._registrar = registrar
        self._configs = configs
        self._labels = labels

    @property
    def prefix(self) -> str:
        return self._repository.prefix

    def publish_archive(self, key: str, filename: str) -> None:
        """A TorchServe archive uploaded at ``models/<file>.mar``: unpacked into a new version
        of the model its manifest names, validated, and labelled with its ``modelVersion``
        once it serves (a label never moves to a version that does not)."""
        try:
            published = publish_archive(self._repository, self._catalog, key, filename)
        except ModelRejected as exc:
            model = archive_stem(filename)
            if not is_valid_model_name(model):
                logger.warning("archive %s rejected: %s", key, exc.message)
                return
            self._catalog.get_model(model) or self._configs.refresh(model)
            self._catalog.put_version(rejected_archive(self._catalog, model, filename, exc.message))
            self._registrar.apply_policy(model)
            return
        except FileNotFoundError:
            return  # deleted since the event: nothing to publish
        model, version = published.model, published.version
        self._serve_every_version(model)
        self._registrar.on_version_change(model, version)
        self._labels.label_archive(model, version, published.label)

    def unpack_in_version(self, key: str, model: str, version: int, filename: str) -> bool:
        """``models/m/1/m.mar``: unpacked into version 1 of m. True when it was refused (the
        refusal is recorded as the version's reason, nothing more to reconcile)."""
        try:
            unpack_in_version(self._repository, key, model, version)
        except ModelRejected as exc:
            self._catalog.get_model(model) or self._configs.refresh(model)
            record = rejected_archive(self._catalog, model, filename, exc.message)
            self._catalog.put_version(replace(record, version=version, present=True))
            self._registrar.apply_policy(model)
            return True
        return False

    def _serve_every_version(self, model: str) -> None:
        """TorchServe serves every registered version of a model (one is the default); a model
        published from archives without a config of its own does too, unless told otherwise."""
        record = self._catalog.get_model(model) or self._configs.refresh(model)
        if record.config_source or "version_policy" in record.overrides:
            return
        overrides = {**record.overrides, **parse_overrides({"version_policy": {"all": {}}})}
        self._catalog.update_model(model, overrides=overrides)

    def misplaced(self, key: str, model: str, filename: str) -> None:
        """A model file uploaded beside the versions: logged with where it belongs and, while
        the model has no version, shown in the index and describe as its version 1's reason."""
        belongs = f"{self._repository.prefix}{model}/1/{filename}"
        logger.warning(
            "ignoring %s: a model file belongs in a version directory, e.g. %s", key, belongs
        )
        if self._catalog.versions(model) or self._repository.head(key) is None:
            return
        self._catalog.get_model(model) or self._configs.refresh(model)
        reason = f"{key} is outside a version directory: upload it as {belongs}"
        self._catalog.put_version(
            VersionRecord(
                model=model,
                version=1,
                present=False,
                state=version_policy.UNAVAILABLE,
                reason=reason,
                validation_error=reason,
                observed_at=time.time_ns(),
            )
        )
        self._registrar.apply_policy(model)
