"""Management operations over the catalog and the repository (TorchServe/Triton style)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lambdaserve.catalog import version_policy
from lambdaserve.catalog.configs import effective_config
from lambdaserve.catalog.label_weights import LabelWeights
from lambdaserve.catalog.repository import ModelRepository
from lambdaserve.catalog.store import Catalog, ModelRecord, VersionRecord
from lambdaserve.config.model_config import ModelConfig, build, merge, parse_overrides
from lambdaserve.errors import (
    Conflict,
    InvalidInput,
    ModelControlDisabled,
    ModelNotFound,
    ModelRejected,
)
from lambdaserve.protocol.names import check_label, check_model_name, parse_version_ref
from lambdaserve.publishing.config_reader import ConfigReader
from lambdaserve.publishing.registrar import Registrar
from lambdaserve.publishing.version_labels import VersionLabels
from lambdaserve.publishing.watchers import ModelWatchers

MAX_PAGE = 1000
OFFSET_TOKEN = re.compile(r"^-?[0-9]{1,9}$")
DEFAULT_PAGE = 100
# How long a load waits for a validation another writer (an S3 event) has in progress
SETTLE_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class ModelView:
    """A model with its effective config, its versions and the resolved default."""

    record: ModelRecord
    config: ModelConfig
    config_error: str
    versions: tuple[VersionRecord, ...]
    default_version: int | None


@dataclass(frozen=True)
class IndexEntry:
    name: str
    version: int
    state: str
    reason: str
    warnings: tuple[str, ...] = ()  # a READY version's config fields not applied


class ModelManager:
    """What the management API does, without HTTP."""

    def __init__(
        self,
        repository: ModelRepository,
        catalog: Catalog,
        registrar: Registrar,
        *,
        configs: ConfigReader,
        labels: VersionLabels,
        watchers: ModelWatchers,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        control_mode: str = "explicit",
    ) -> None:
        self.repository = repository
        self._control_mode = control_mode
        self._catalog = catalog
        self._registrar = registrar
        self._configs = configs
        self._labels = labels
        self._watchers = watchers
        self._sleep = sleep
        self._clock = clock

    def list_models(self, limit: int, page_token: str | None) -> tuple[list[str], str | None]:
        if not 1 <= limit <= MAX_PAGE:
            limit = DEFAULT_PAGE  # as TorchServe clamps an out-of-range limit
        if page_token is not None and OFFSET_TOKEN.fullmatch(page_token):
            # TorchServe's tokens are offsets into the sorted names (a negative one is 0)
            start = max(0, int(page_token))
            names = self._catalog.all_model_names()
            end = start + limit
            return names[start:end], (str(end) if end < len(names) else None)
        return self._catalog.list_models(limit, page_token)

    def all_model_names(self) -> list[str]:
        return self._catalog.all_model_names()

    def cold_starts(self, name: str, version: int) -> list[dict[str, Any]]:
        """The version's newest cold starts, wherever it loaded (describe's ``coldStart``)."""
        return self._catalog.cold_starts(name, version)

    def view(self, name: str) -> ModelView:
        record = self._record(name)
        effective = effective_config(record, name)
        versions = tuple(self._catalog.versions(name))
        served = [v.version for v in versions if v.state == version_policy.READY]
        return ModelView(
            record=record,
            config=effective.config,
            config_error=effective.error,
            versions=versions,
            default_version=version_policy.default_version(record.default_version, served),
        )

    def version(self, name: str, version: int) -> tuple[ModelView, VersionRecord]:
        view = self.view(name)
        for record in view.versions:
            if record.version == version:
                return view, record
        raise ModelNotFound(f"model {name!r} has no version {version}")

    def set_default(self, name: str, version: int) -> None:
        _, record = self.version(name, version)
        if record.state != version_policy.READY:
            raise Conflict(
                f"version {version} of {name!r} is {record.state} ({record.reason}); only a "
                "READY version can be the default"
            )
        self._catalog.update_model(name, default_version=version)
        self._watchers.tell(name)

    def set_label(self, name: str, label: str, version: int) -> None:
        """Point ``label`` at a READY version (or move it there: the one-call rollback)."""
        check_label(label)
        view, record = self.version(name, version)
        if record.state != version_policy.READY:
            raise Conflict(
                f"version {version} of {name!r} is {record.state} ({record.reason}); a label "
                "points at a READY version"
            )
        labels = {**view.record.version_labels, label: version}
        weighted = {k: v for k, v in view.record.label_weights.items() if k != label}
        self._catalog.update_model(name, version_labels=labels, label_weights=weighted or None)
        self._watchers.tell(name)

    def set_label_weights(self, name: str, label: str, weights: LabelWeights) -> None:
        """Point ``label`` at several versions, each for its share of the label's requests
        (the new weights replace the label's, never add to them). A version with a weight
        above 0 must be READY; one at 0 must exist (a canary rolled back stays named)."""
        check_label(label)
        for version, weight in weights.versions:
            _, record = self.version(name, version)
            if weight and record.state != version_policy.READY:
                raise Conflict(
                    f"version {version} of {name!r} is {record.state} ({record.reason}); a "
                    "label sends requests to READY versions only (give it weight 0 to keep it)"
                )
        if weights.shadow is not None:
            _, shadowing = self.version(name, weights.shadow.version)
            if shadowing.state != version_policy.READY:
                raise Conflict(
                    f"version {weights.shadow.version} of {name!r} is {shadowing.state} "
                    f"({shadowing.reason}); a shadow is a READY version"
                )
        model = self._record(name)
        weighted = {**model.label_weights, label: weights.to_json()}
        labels = {k: v for k, v in model.version_labels.items() if k != label}
        self._catalog.update_model(name, version_labels=labels or None, label_weights=weighted)
        self._watchers.tell(name)

    def remove_label(self, name: str, label: str) -> None:
        record = self._record(name)
        if label not in record.version_labels and label not in record.label_weights:
            raise ModelNotFound(f"model {name!r} has no version label {label!r}")
        labels = {k: v for k, v in record.version_labels.items() if k != label}
        weighted = {k: v for k, v in record.label_weights.items() if k != label}
        self._catalog.update_model(
            name, version_labels=labels or None, label_weights=weighted or None
        )
        self._watchers.tell(name)

    def version_number(self, name: str, text: str) -> int:
        """A version segment of a URL: a number, or one of the model's labels."""
        ref = parse_version_ref(text)
        if isinstance(ref, int):
            return ref
        labels = self._record(name).version_labels
        if ref not in labels:
            raise ModelNotFound(f"model {name!r} has no version label {ref!r}")
        return labels[ref]

    def delete_version(self, name: str, version: int) -> int:
        """Delete the version's objects; the catalog follows through the S3 events."""
        check_model_name(name)
        deleted = self.repository.delete_version(name, version)
        if deleted == 0 and self._catalog.get_version(name, version) is None:
            raise ModelNotFound(f"model {name!r} has no version {version}")
        return deleted

    def update_config(self, name: str, fields: dict[str, Any]) -> ModelConfig:
        """Apply model-config fields (Triton JSON form) on top of the config file."""
        record = self._record(name)
        fields = dict(fields)
        if "preload" in fields:
            self.set_preload(name, fields.pop("preload"))
            if not fields:
                return build(merge(record.file_config, record.overrides), name)
        if not fields:
            raise InvalidInput(
                'give at least one model-config field, e.g. {"version_policy": {"all": {}}}, '
                'or {"preload": true}'
            )
        overrides = {**record.overrides, **parse_overrides(fields)}
        config = build(merge(record.file_config, overrides), name)
        try:
            self._configs.check_against_serving(name, config)
        except ModelRejected as exc:
            raise InvalidInput(
                f"not applied, the serving versions would stop: {exc.message}"
            ) from None
        self._catalog.update_model(name, overrides=overrides)
        self._registrar.reconcile_model(name)
        return config

    def set_preload(self, name: str, preload: Any) -> None:
        """Mark the model's default version to load before a SnapStart snapshot (or not)."""
        if not isinstance(preload, bool):
            raise InvalidInput('"preload" must be true or false')
        self._catalog.update_model(name, preload=True if preload else None)

    def load(self, name: str, config_fields: dict[str, Any] | None = None) -> None:
        """Triton's explicit load: serve again (optionally with config overrides)."""
        self._check_explicit_control()
        self._record(name)
        if config_fields:
            self.update_config(name, config_fields)
        self._catalog.update_model(name, unloaded=False)
        # As Triton's load re-reads the repository: versions rejected for a missing runtime
        # (or a bucket error) are validated again.
        self._registrar.reconcile_model(name)
        versions = self._settled_versions(name)
        self._labels.label_recovered_archives(name)
        if not any(v.state == version_policy.READY for v in versions):
            # Triton answers a load that serves nothing with 400 and the reason
            reasons = "; ".join(f"version {v.version}: {v.reason}" for v in versions)
            raise InvalidInput(f"failed to load '{name}': {reasons or 'it has no versions'}")

    def _settled_versions(self, name: str) -> list[VersionRecord]:
        """The versions once no validation is in progress: an S3 event's reconcile that
        started after this load's wins the catalog write, and Triton's load answers only
        when the model is loaded (or not)."""
        deadline = self._clock() + SETTLE_TIMEOUT_S
        delay = 0.05
        versions = self._catalog.versions(name)
        while any(v.pending for v in versions) and self._clock() < deadline:
            self._sleep(delay)
            delay = min(delay * 2, 1.0)
            versions = self._catalog.versions(name)
        return versions

    def unload(self, name: str) -> None:
        """Triton's explicit unload: keep the files, stop serving every version."""
        self._check_explicit_control()
        self._record(name)
        self._catalog.update_model(name, unloaded=True)
        self._registrar.apply_policy(name)

    def index(self, ready_only: bool = False) -> list[IndexEntry]:
        """Triton's repository index over every model in the catalog."""
        entries = []
        for name in self._catalog.all_model_names():
            versions = self._catalog.versions(name)
            model = self._catalog.get_model(name) if versions else None
            warnings = model.config_warnings if model is not None else ()
            for record in versions:
                ready = record.state == version_policy.READY
                if ready_only and not ready:
                    continue
                entries.append(
                    IndexEntry(
                        name, record.version, record.state, record.reason, warnings if ready else ()
                    )
                )
        return entries

    def _check_explicit_control(self) -> None:
        """Triton refuses load / unload unless --model-control-mode=explicit, in its words
        (its clients match them); what to do instead follows."""
        if self._control_mode != "explicit":
            raise ModelControlDisabled(
                "explicit model load / unload is not allowed if polling is enabled "
                f"(LAMBDASERVE_MODEL_CONTROL_MODE={self._control_mode}): models follow the "
                "bucket here; upload or delete a version, or run with the mode explicit"
            )

    def _record(self, name: str) -> ModelRecord:
        check_model_name(name)
        record = self._catalog.get_model(name)
        if record is None:
            raise ModelNotFound(
                f"model {name!r} is not in the catalog; publish it under "
                f"{self.repository.url(name)}"
            )
        return record
