"""Ensembles in the catalog: validated against the step models the catalog holds now.

An ensemble's validity depends on its steps, so its fingerprint covers them (each step's
chosen version and signature) and each step model records the ensembles that use it: when
a step's versions change, those ensembles are validated again, in any order of uploads.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from lambdaserve.catalog import version_policy
from lambdaserve.catalog.store import (
    Catalog,
    VersionRecord,
    already_validated,
    loading_version,
    now_iso,
)
from lambdaserve.config.model_config import EnsembleStep, ModelConfig
from lambdaserve.config.runtime_names import ENSEMBLE_RUNTIME
from lambdaserve.errors import ModelRejected
from lambdaserve.runtimes.ensemble import check_steps, plan
from lambdaserve.tensors.signature import Signature

_SK = "ENSEMBLES"


class Dependents:
    """Which ensembles use a model as a step (an item beside the model's, not a model)."""

    def __init__(self, dynamodb: Any, table: str) -> None:
        self._db = dynamodb
        self._table = table

    def add(self, step_model: str, ensemble: str) -> None:
        self._db.update_item(
            TableName=self._table,
            Key={"pk": {"S": f"DEPENDENTS#{step_model}"}, "sk": {"S": _SK}},
            UpdateExpression="ADD ensembles :e",
            ExpressionAttributeValues={":e": {"SS": [ensemble]}},
        )

    def of(self, step_model: str) -> set[str]:
        item = self._db.get_item(
            TableName=self._table,
            Key={"pk": {"S": f"DEPENDENTS#{step_model}"}, "sk": {"S": _SK}},
            ConsistentRead=True,
        ).get("Item")
        return set(item["ensembles"]["SS"]) if item and "ensembles" in item else set()


@dataclass(frozen=True)
class StepState:
    """What the catalog says of a step model now: its chosen version and signature."""

    version: int | None
    signature: Signature | None
    problem: str = ""


class EnsembleRegistry:
    def __init__(self, catalog: Catalog, dependents: Dependents) -> None:
        self._catalog = catalog
        self.dependents = dependents

    def reconcile(
        self,
        model: str,
        version: int,
        config: ModelConfig,
        existing: VersionRecord | None,
        observed_at: int,
        *,
        rejected: Callable[[VersionRecord, str], VersionRecord],
    ) -> None:
        """An ensemble version: its graph against the step models the catalog holds now;
        validated again only when the config or a step's chosen version changes."""
        steps = self.steps(config)
        fingerprint = self.fingerprint(config, steps)
        if already_validated(existing, fingerprint):
            return
        loading = loading_version(model, version, fingerprint, observed_at, existing)
        if not self._catalog.put_version(loading):
            return
        try:
            signature = self.validate(model, config, steps)
        except ModelRejected as exc:
            self._catalog.put_version(rejected(loading, exc.message))
            return
        self._catalog.put_version(
            replace(
                loading,
                pending=False,
                valid=True,
                reason="",
                runtime=ENSEMBLE_RUNTIME,
                signature=signature.to_json(),
                validated_at=now_iso(),
            )
        )

    def steps(self, config: ModelConfig) -> list[StepState]:
        return [self._step(step) for step in config.ensemble_steps]

    def fingerprint(self, config: ModelConfig, steps: list[StepState]) -> str:
        material = {
            "config": config.to_triton_json(),
            "steps": [
                [s.version, s.signature.to_json() if s.signature else None, s.problem]
                for s in steps
            ],
        }
        return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()

    def validate(self, model: str, config: ModelConfig, steps: list[StepState]) -> Signature:
        """The ensemble's signature, or ModelRejected naming the step that is wrong."""
        for step in config.ensemble_steps:
            self.dependents.add(step.model_name, model)
        plan(config)
        for index, (step, state) in enumerate(zip(config.ensemble_steps, steps, strict=True)):
            if state.problem:
                raise ModelRejected(f"ensemble step {index} ({step.model_name!r}): {state.problem}")
        check_steps(config, [s.signature for s in steps if s.signature is not None])
        return Signature(config.inputs, config.outputs)

    def _step(self, step: EnsembleStep) -> StepState:
        record = self._catalog.get_model(step.model_name)
        if record is None:
            return StepState(None, None, "the model is not in the catalog")
        versions = {v.version: v for v in self._catalog.versions(step.model_name)}
        ready = sorted(v for v, r in versions.items() if r.state == version_policy.READY)
        if step.model_version > 0:
            chosen: int | None = step.model_version
            if chosen not in ready:
                state = versions[chosen].state if chosen in versions else "not in the catalog"
                return StepState(chosen, None, f"version {chosen} is {state}")
        else:
            chosen = version_policy.default_version(record.default_version, ready)
            if chosen is None:
                return StepState(None, None, "no version of the model is READY")
        return StepState(chosen, Signature.from_json(versions[chosen].signature))
