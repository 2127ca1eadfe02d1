"""Repository events -> validation -> catalog.

S3 events arrive at least once, duplicated and out of order (moto's carry no
``sequencer``), so an event is only a trigger: the registrar reconciles the
affected version or model against what the bucket holds *now*. Any order of
events therefore converges to the bucket's truth.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from botocore.exceptions import BotoCoreError, ClientError

from lambdaserve.catalog import version_policy
from lambdaserve.catalog.configs import effective_config
from lambdaserve.catalog.repository import ModelRepository, ObjectInfo
from lambdaserve.catalog.store import (
    Catalog,
    ModelRecord,
    VersionRecord,
    already_validated,
    loading_version,
    now_iso,
)
from lambdaserve.config.model_config import ModelConfig
from lambdaserve.config.model_files import CHECKED_WHERE_IT_SERVES, CODE_FILES
from lambdaserve.errors import ModelRejected, RuntimeMissing, first_line
from lambdaserve.pipelines.ensemble_registry import EnsembleRegistry
from lambdaserve.publishing.config_reader import ConfigReader
from lambdaserve.publishing.serving_check import ServingCheck
from lambdaserve.publishing.validation import VersionValidator
from lambdaserve.publishing.version_labels import VersionLabels
from lambdaserve.publishing.version_states import derive_states, validation_fingerprint
from lambdaserve.publishing.watchers import ModelWatchers

logger = logging.getLogger(__name__)
# Concurrent writers of one model settle in a try or two; the last fact writer re-applies.
_POLICY_ATTEMPTS = 5


class _ObjectsChanged(Exception):
    """A version's object disappeared while it was validated: the listing is stale."""


class Registrar:
    """Keeps the catalog equal to the repository bucket."""

    def __init__(
        self,
        repository: ModelRepository,
        catalog: Catalog,
        validator: VersionValidator,
        clock: Callable[[], int] = time.time_ns,
        *,
        configs: ConfigReader,
        labels: VersionLabels,
        watchers: ModelWatchers,
        ensembles: EnsembleRegistry | None = None,
    ) -> None:
        """The collaborators come from the composition root (``wiring.manage``), which hands
        the same ones to the uploads and the management API: none is reached through here."""
        self._repository = repository
        self._catalog = catalog
        self._validator = validator
        self._configs = configs
        self._labels = labels
        self._watchers = watchers
        self._ensembles = ensembles
        # Models this thread is reconciling (an ensemble among its steps' dependents).
        # Per thread: a load must not skip a model an S3 event reconciles meanwhile.
        self._in_thread = threading.local()
        self._retired: set[str] = set()  # models with a version just removed
        self._clock = clock
        self._serving_check: ServingCheck | None = None

    def check_where_it_serves(self, check: ServingCheck | None) -> None:
        """Versions with model code are READY only once ``check`` loaded them there."""
        self._serving_check = check

    def on_version_change(self, model: str, version: int) -> None:
        """Reconcile one version against the bucket, then re-apply the model's version_policy."""
        record = self._catalog.get_model(model)
        if record is None or not record.config_observed_at:
            # no config read yet (or the item is half-made by a concurrent writer): read it,
            # so the version is never validated without the config that is in the bucket
            record = self.refresh_config(model)
        self.reconcile_version(model, version, record)
        self.apply_policy(model)

    def reconcile_all(self, concurrency: int = 1) -> int:
        """Reconcile every model found in the bucket or the catalog; returns the count.
        With ``concurrency`` above 1, that many models at once: one whose code loads where it
        serves (seconds) holds its own lane, not every model after it."""
        models = sorted(set(self._repository.model_names()) | set(self._catalog.all_model_names()))
        if concurrency <= 1:
            for model in models:
                self.reconcile_model(model)
            return len(models)
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(concurrency, thread_name_prefix="reconcile") as lanes:
            list(lanes.map(self.reconcile_model, models))  # the first failure raises here
        return len(models)

    def reconcile_model(self, model: str) -> None:
        """Refresh the config, reconcile every version, then apply the version_policy."""
        reconciling = self._reconciling()
        if model in reconciling:
            return  # an ensemble among its own steps' dependents: once is enough
        reconciling.add(model)
        try:
            record = self.refresh_config(model)
            versions = set(self._repository.versions(model))
            if not versions and effective_config(record, model).config.is_ensemble:
                versions.add(1)  # an ensemble's config alone serves as version 1
            versions |= {v.version for v in self._catalog.versions(model)}
            for version in sorted(versions):
                self.reconcile_version(model, version, record)
            self.apply_policy(model)
        finally:
            reconciling.discard(model)

    def _reconciling(self) -> set[str]:
        models: set[str] | None = getattr(self._in_thread, "models", None)
        if models is None:
            models = self._in_thread.models = set()
        return models

    def refresh_config(self, model: str) -> ModelRecord:
        """Read the model's config file from the bucket into the catalog (last good kept)."""
        return self._configs.refresh(model)

    def reconcile_version(self, model: str, version: int, record: ModelRecord) -> None:
        """Bring one version item in line with the version's objects in the bucket."""
        for _ in range(3):
            try:
                self._reconcile_version(model, version, record)
                return
            except _ObjectsChanged:
                continue  # an object went away mid-validation: look at the bucket again
        self._reconcile_version(model, version, record)

    def _reconcile_version(self, model: str, version: int, record: ModelRecord) -> None:
        observed_at = self._clock()
        objects = self._repository.version_objects(model, version)
        existing = self._catalog.get_version(model, version)
        # validated against the config as written: auto_complete_config fills it in again
        config = effective_config(replace(record, auto_completed={}), model).config
        if (
            config.is_ensemble
            and self._ensembles is not None
            and self._ensemble_present(model, version, objects)
        ):
            self._ensembles.reconcile(
                model, version, config, existing, observed_at, rejected=self._rejected
            )
            return
        if not objects:
            if existing is not None and existing.present:
                self._retired.add(model)  # its ensembles hear of it in apply_policy
                self._catalog.put_version(
                    VersionRecord(
                        model=model,
                        version=version,
                        present=False,
                        state=version_policy.UNAVAILABLE,
                        reason="removed: the version has no objects in the repository",
                        observed_at=observed_at,
                        created_at=existing.created_at,
                    )
                )
            return
        fingerprint = validation_fingerprint(objects, config)
        if already_validated(existing, fingerprint):
            logger.info("%s version %s is unchanged since it was validated", model, version)
            return
        if existing is not None and existing.present and not existing.fingerprint:
            logger.info(  # a failure of this environment or of a load: never remembered
                "%s version %s: validating again (last time: %s)",
                model,
                version,
                existing.validation_error or existing.reason,
            )
        loading = loading_version(model, version, fingerprint, observed_at, existing)
        if not self._catalog.put_version(loading):
            return
        validated = self._validate(loading, objects, config)
        if self._catalog.put_version(validated) and validated.valid:
            self._record_completion(record, validated)
            self._labels.label_handler_folder(model, validated)

    def _record_completion(self, record: ModelRecord, validated: VersionRecord) -> None:
        """What auto_complete_config filled in becomes part of the model's config (Triton
        keeps one config per model: the version validated last says)."""
        current = self._catalog.get_model(validated.model) or record
        if validated.auto_completed != current.auto_completed:
            self._catalog.update_model(
                validated.model, auto_completed=validated.auto_completed or None
            )

    def _ensemble_present(self, model: str, version: int, objects: list[ObjectInfo]) -> bool:
        return bool(objects) or (version == 1 and not self._repository.versions(model))

    def _validate(
        self, loading: VersionRecord, objects: list[ObjectInfo], config: ModelConfig
    ) -> VersionRecord:
        def progress(line: str) -> None:
            logger.info("%s version %s: %s", loading.model, loading.version, line)
            self._catalog.set_loading_reason(loading, line)

        try:
            validated = self._validator.validate(objects, config, progress)
        except RuntimeMissing as exc:
            # A fact about this environment, not the model: validated again when asked
            # (load, reconcile, a re-upload of the same bytes), never remembered.
            return replace(self._rejected(loading, exc.message), fingerprint="")
        except ModelRejected as exc:
            return self._rejected(loading, exc.message)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                raise _ObjectsChanged from exc  # deleted while validating: not an error
            self._record_bucket_error(loading, exc)
            raise
        except BotoCoreError as exc:
            self._record_bucket_error(loading, exc)
            raise
        except Exception as exc:
            logger.exception("validation of %s/%s failed", loading.model, loading.version)
            return self._rejected(
                loading, f"validation failed: {type(exc).__name__}: {first_line(exc)}"
            )
        candidate = replace(
            loading,
            pending=False,
            valid=True,
            reason="",
            runtime=validated.runtime,
            model_file=validated.model_file,
            signature=validated.signature.to_json(),
            sha256=validated.sha256,
            size=validated.size,
            files=tuple(f.__dict__ for f in validated.files),
            notes=validated.notes,
            validated_at=now_iso(),
            auto_completed=validated.completed_config,
            environment=validated.environment,
        )
        if self._serving_check is None or not (
            validated.model_file in CODE_FILES or validated.runtime in CHECKED_WHERE_IT_SERVES
        ):
            return candidate
        return self._checked_where_it_serves(loading, candidate)

    def _checked_where_it_serves(
        self, loading: VersionRecord, candidate: VersionRecord
    ) -> VersionRecord:
        """READY means it answers: model code is loaded where it serves (import,
        ``initialize``, warm-up) before the version may serve; its own error otherwise."""
        assert self._serving_check is not None
        self._catalog.set_loading_reason(loading, "loading where it serves")
        try:
            answer = self._serving_check.check(candidate)
        except (ClientError, BotoCoreError) as exc:
            self._record_bucket_error(loading, exc, "could not ask the infer function to load it")
            raise
        if not answer.reason:
            logger.info(
                "%s version %s loaded in %s", loading.model, loading.version, answer.environment
            )
            return candidate
        reason = f"failed to load where it serves ({answer.environment}): {answer.reason}"
        # not remembered: a load, a reconcile or a re-upload of the same bytes checks again
        return replace(self._rejected(loading, reason), fingerprint="")

    def _record_bucket_error(
        self,
        loading: VersionRecord,
        exc: Exception,
        what: str = "could not read the version from the bucket",
    ) -> None:
        """Not a fact about the model: recorded without the fingerprint (so the next event
        or reconcile validates again) while the event is retried."""
        self._catalog.put_version(
            replace(
                self._rejected(loading, f"{what}: {exc}"),
                fingerprint="",
            )
        )

    def _rejected(self, loading: VersionRecord, reason: str) -> VersionRecord:
        logger.info(  # the words carry the context too: local text logs drop `extra`
            "%s version %s rejected: %s",
            loading.model,
            loading.version,
            reason,
            extra={"model": loading.model, "version": loading.version, "reason": reason},
        )
        return replace(
            loading,
            pending=False,
            valid=False,
            validation_error=reason,
            state=version_policy.UNAVAILABLE,
            reason=reason,
            validated_at=now_iso(),
        )

    def apply_policy(self, model: str) -> None:
        """Derive each version's state from the facts, the config and the version_policy.

        Derived again whenever another writer changed a fact in between (see Catalog), so
        a stale read never overwrites a newer state; the writer of that fact applies the
        policy after it, so giving up after a few tries leaves nothing wrong behind.
        """
        changed = False
        for _ in range(_POLICY_ATTEMPTS):
            revision = self._catalog.revision(model)
            changes = derive_states(self._catalog, model)
            if not changes or self._catalog.set_version_states(model, revision, changes):
                for version, state, reason in changes:
                    logger.info(
                        "%s version %s is %s%s",
                        model,
                        version.version,
                        state,
                        f": {reason}" if reason else "",
                    )
                changed = bool(changes)
                break
        if model in self._retired:
            self._retired.discard(model)
            changed = True
        if changed:
            # whoever made an archive's version READY labels it (its modelVersion): the
            # publish that unpacked it may have seen another writer still validating it
            self._labels.label_recovered_archives(model)
        self._watchers.tell(model)
        if changed and self._ensembles is not None:
            # Ensembles using this model as a step are validated again against it.
            for ensemble in sorted(self._ensembles.dependents.of(model)):
                self.reconcile_model(ensemble)
