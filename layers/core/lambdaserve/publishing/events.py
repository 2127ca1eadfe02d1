"""One delivery of repository events: which versions and models to reconcile, once each,
and TorchServe archives uploaded beside the models."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path

import orjson

from lambdaserve.catalog import version_policy
from lambdaserve.catalog.items import VersionRecord
from lambdaserve.catalog.repository import (
    ArchiveKey,
    ConfigKey,
    is_valid_model_name,
    parse_key,
)
from lambdaserve.config.model_config import parse_overrides
from lambdaserve.config.model_files import ALIASES, MANIFEST_FILE, MODEL_FILES
from lambdaserve.errors import ModelRejected
from lambdaserve.publishing.archives import archive_stem, publish_archive, rejected_archive
from lambdaserve.publishing.registrar import Registrar
from lambdaserve.publishing.version_archives import is_packed_archive, unpack_in_version

logger = logging.getLogger("lambdaserve.publishing.registrar")


class EventBatch:
    """Reconciles each target at most once per delivery.

    Every event in a batch was emitted before the batch was received, so one
    reconcile after receiving sees everything any of them announces: duplicates and
    bursts for the same version (or model) cost one reconcile, not one each.
    """

    def __init__(self, registrar: Registrar) -> None:
        self._registrar = registrar
        self._models: set[str] = set()
        self._versions: set[tuple[str, int]] = set()

    def on_object_event(self, key: str) -> None:
        parsed = parse_key(key, self._registrar.repository.prefix)
        if isinstance(parsed, ArchiveKey):
            publish_uploaded_archive(self._registrar, key, parsed.filename)
            return
        if parsed is None:
            logger.warning(
                "ignoring %s: %s", key, layout_advice(key, self._registrar.repository.prefix)
            )
            return
        if isinstance(parsed, ConfigKey) and parsed.filename in MODEL_FILES:
            _misplaced(self._registrar, key, parsed.model, parsed.filename)
        if parsed.model in self._models:
            return
        if isinstance(parsed, ConfigKey):
            self._registrar.reconcile_model(parsed.model)
            self._models.add(parsed.model)
            return
        if is_packed_archive(parsed.path):
            self._unpack(key, parsed.model, parsed.version, parsed.path)
        if (parsed.model, parsed.version) not in self._versions:
            self._registrar.on_version_change(parsed.model, parsed.version)
            self._versions.add((parsed.model, parsed.version))

    def _unpack(self, key: str, model: str, version: int, filename: str) -> None:
        """``models/m/1/m.mar``: unpacked into version 1 of m (a refusal is its reason)."""
        registrar = self._registrar
        try:
            unpack_in_version(registrar.repository, key, model, version)
        except ModelRejected as exc:
            registrar.catalog.get_model(model) or registrar.refresh_config(model)
            record = rejected_archive(registrar.catalog, model, filename, exc.message)
            registrar.catalog.put_version(replace(record, version=version, present=True))
            registrar.apply_policy(model)
            self._versions.add((model, version))


def publish_uploaded_archive(registrar: Registrar, key: str, filename: str) -> None:
    """A TorchServe archive uploaded at ``models/<file>.mar``: unpacked into a new version
    of the model its manifest names, validated, and labelled with its ``modelVersion``
    once it serves (a label never moves to a version that does not)."""
    try:
        published = publish_archive(registrar.repository, registrar.catalog, key, filename)
    except ModelRejected as exc:
        model = archive_stem(filename)
        if not is_valid_model_name(model):
            logger.warning("archive %s rejected: %s", key, exc.message)
            return
        registrar.catalog.get_model(model) or registrar.refresh_config(model)
        registrar.catalog.put_version(
            rejected_archive(registrar.catalog, model, filename, exc.message)
        )
        registrar.apply_policy(model)
        return
    except FileNotFoundError:
        return  # deleted since the event: nothing to publish
    model, version = published.model, published.version
    _serve_every_version(registrar, model)
    registrar.on_version_change(model, version)
    _label(registrar, model, version, published.label)


def label_recovered_archives(registrar: Registrar, model: str) -> None:
    """Archive versions READY without their ``modelVersion`` label (their load failed at
    publish and a later load succeeded) get it, as their publish would have given it."""
    versions = registrar.catalog.versions(model)
    record = registrar.catalog.get_model(model)
    labels = record.version_labels if record else {}
    labelled = set(labels.values())
    for version in versions:
        if version.model_file != MANIFEST_FILE or version.version in labelled:
            continue
        manifest = registrar.repository.read_model_file(
            model, f"{version.version}/{MANIFEST_FILE}", 1024**2
        )
        try:
            label = orjson.loads(manifest or b"{}").get("model", {}).get("modelVersion")
        except (orjson.JSONDecodeError, AttributeError):
            continue
        if isinstance(label, str) and label and label not in labels:  # never moved back
            _label(registrar, model, version.version, label)


def _label(registrar: Registrar, model: str, version: int, label: str) -> None:
    """The archive's ``modelVersion`` on its version, once it serves (never before)."""
    record = registrar.catalog.get_version(model, version)
    if label and record is not None and record.state == version_policy.READY:
        current = registrar.catalog.get_model(model)
        labels = {**(current.version_labels if current else {}), label: version}
        registrar.catalog.update_model(model, version_labels=labels)
        logger.info("%s version %s is labelled %s", model, version, label)


def _serve_every_version(registrar: Registrar, model: str) -> None:
    """TorchServe serves every registered version of a model (one is the default); a model
    published from archives without a config of its own does too, unless told otherwise."""
    record = registrar.catalog.get_model(model) or registrar.refresh_config(model)
    if record.config_source or "version_policy" in record.overrides:
        return
    overrides = {**record.overrides, **parse_overrides({"version_policy": {"all": {}}})}
    registrar.catalog.update_model(model, overrides=overrides)


def _misplaced(registrar: Registrar, key: str, model: str, filename: str) -> None:
    """A model file uploaded beside the versions: logged with where it belongs and, while
    the model has no version, shown in the index and describe as its version 1's reason."""
    belongs = f"{registrar.repository.prefix}{model}/1/{filename}"
    logger.warning(
        "ignoring %s: a model file belongs in a version directory, e.g. %s", key, belongs
    )
    if registrar.catalog.versions(model) or registrar.repository.head(key) is None:
        return
    registrar.catalog.get_model(model) or registrar.refresh_config(model)
    reason = f"{key} is outside a version directory: upload it as {belongs}"
    registrar.catalog.put_version(
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
    registrar.apply_policy(model)


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
