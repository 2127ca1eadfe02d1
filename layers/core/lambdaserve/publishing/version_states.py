"""What the registrar derives from the catalog's facts: each version's state under the
model's version_policy, and the fingerprint of what a validation depended on."""

from __future__ import annotations

import hashlib
import json

from lambdaserve.catalog import version_policy
from lambdaserve.catalog.configs import effective_config
from lambdaserve.catalog.repository import ObjectInfo
from lambdaserve.catalog.store import Catalog, VersionRecord
from lambdaserve.config.model_config import ModelConfig
from lambdaserve.config.model_files import choosing_backend, selects_runtime


def derive_states(catalog: Catalog, model: str) -> list[tuple[VersionRecord, str, str]]:
    """Each version whose state the facts, the config and the version_policy now derive
    differently, with that state and its reason."""
    record = catalog.get_model(model)
    effective = effective_config(record, model)
    versions = [v for v in catalog.versions(model) if not v.pending]
    served = version_policy.served_versions(
        effective.config.version_policy, (v.version for v in versions if v.present and v.valid)
    )
    changes = []
    for version in versions:
        state, reason = version_policy.version_state(
            version_policy.VersionFacts(
                version.version,
                version.present,
                version.valid,
                version.validation_error,
                version.notes,
            ),
            served,
            effective.config.version_policy,
            unloaded=bool(record and record.unloaded),
            config_error=effective.error,
            rejected_config=record.rejected_config if record else "",
        )
        if (state, reason) != (version.state, version.reason):
            changes.append((version, state, reason))
    return changes


def validation_fingerprint(objects: list[ObjectInfo], config: ModelConfig) -> str:
    """Identity of what validation depends on: the objects, the declared tensors and a
    backend that chooses the runtime (absent otherwise: earlier fingerprints stay equal)."""
    material: dict[str, object] = {
        "objects": sorted((o.key, o.etag, o.size) for o in objects),
        "inputs": [t.to_json() for t in config.inputs],
        "outputs": [t.to_json() for t in config.outputs],
        "max_batch_size": config.max_batch_size,
    }
    if selects_runtime(config):
        material["backend"] = choosing_backend(config)
    if config.default_model_filename:
        material["default_model_filename"] = config.default_model_filename
    if config.parameters:
        # model code reads them in initialize (args["model_config"]): a changed parameter is
        # loaded again where it serves before READY, as Triton's load with a new config does
        material["parameters"] = list(config.parameters)
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()
