"""Rollouts, without HTTP: start one, read its status, promote or abort it, and the judge's
tick over every active one (``advance_all``: the scheduled function's, and ``dev``'s loop).

Each move is stored first (conditional on the revision read: one writer wins), then the
label's weights move, then the move is announced."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from lambdaserve.catalog.label_weights import LabelWeights, label_weights_from
from lambdaserve.catalog.store import Catalog
from lambdaserve.catalog.tallies import TallyStore
from lambdaserve.errors import Conflict, InvalidInput, ModelNotFound
from lambdaserve.rollouts.analysis import Measurement, judge, unmeasured
from lambdaserve.rollouts.events import RolloutAnnouncer
from lambdaserve.rollouts.progress import (
    ACTIVE,
    PAUSED,
    PROGRESSING,
    PROMOTED,
    Move,
    Rollout,
    begin,
    promote_fully,
    roll_back,
    step_on,
    tick,
)
from lambdaserve.rollouts.spec import label_of, parse_rollout
from lambdaserve.rollouts.store import RolloutStore

logger = logging.getLogger(__name__)


class LabelMover(Protocol):
    """How a label moves (the management API's own checks: READY versions only)."""

    def set_label(self, name: str, label: str, version: int) -> None: ...

    def set_label_weights(self, name: str, label: str, weights: LabelWeights) -> None: ...


class Rollouts:
    def __init__(
        self,
        catalog: Catalog,
        store: RolloutStore,
        tallies: TallyStore,
        *,
        labels: LabelMover,
        announcer: RolloutAnnouncer,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._catalog = catalog
        self._store = store
        self._tallies = tallies
        self._labels = labels
        self._announcer = announcer
        self._clock = clock

    def start(self, model: str, body: dict[str, Any]) -> dict[str, Any]:
        stable, kept = self._serving(model, label_of(body))
        spec = parse_rollout(model, body, stable)
        found = self._store.get(model, spec.label)
        if found is not None and found[0].phase in ACTIVE:
            raise Conflict(
                f"label {spec.label!r} of {model!r} has a rollout {found[0].phase}: promote or "
                f"abort it first (POST /models/{model}/rollouts/{spec.label}/abort)"
            )
        rollout, weight, events = begin(spec, self._clock())
        self._move_label(rollout, weight, kept)  # refuses a version that is not READY
        self._store.put(rollout, None)
        self._announcer.announce(rollout, events)
        return rollout.to_json()

    def status(self, model: str, label: str) -> dict[str, Any]:
        return self._get(model, label)[0].to_json()

    def of_model(self, model: str) -> list[dict[str, Any]]:
        return [r.to_json() for r in self._store.of_model(model)]

    def promote(self, model: str, label: str, *, full: bool = False) -> dict[str, Any]:
        """A person's promote: the next step (a paused rollout resumes), or all of it."""
        rollout, revision = self._active(model, label)
        now = self._clock()
        if full:
            return self._apply(promote_fully(rollout, now, "promoted by a person"), revision)
        return self._apply(step_on(rollout, now, "promoted by a person"), revision)

    def abort(self, model: str, label: str) -> dict[str, Any]:
        rollout, revision = self._active(model, label)
        move = roll_back(rollout, self._clock(), "aborted by a person", None, by="person")
        return self._apply(move, revision)

    def advance_all(self) -> list[dict[str, Any]]:
        """One tick of the judge over every progressing rollout; each one's failure is its
        own (logged), never the others'."""
        moved = []
        for model, label in self._store.active():
            try:
                found = self._store.get(model, label)
                if found is None or found[0].phase != PROGRESSING:
                    continue
                rollout, revision = found
                move = tick(rollout, self._clock(), self._measure(rollout))
                if move[0] != rollout:
                    moved.append(self._apply(move, revision))
            except Conflict:
                continue  # another judge or a person moved it this tick
            except Exception:
                logger.exception("rollout of %s label %s not advanced", model, label)
        return moved

    def _measure(self, rollout: Rollout) -> Callable[[int, int], Measurement]:
        spec = rollout.spec

        def measure(start: int, end: int) -> Measurement:
            try:
                canary = self._tallies.window(spec.model, spec.to, start, end)
                stable = self._tallies.window(spec.model, spec.stable, start, end)
            except Exception as exc:  # Argo's provider error
                return unmeasured(f"tallies not read: {exc}", start, end)
            return judge(spec.analysis, canary, stable, start, end)

        return measure

    def _apply(self, move: Move, revision: int) -> dict[str, Any]:
        rollout, weight, events = move
        self._store.put(rollout, revision)  # Conflict: someone else moved it first
        _, kept = self._serving(rollout.spec.model, rollout.spec.label, strict=False)
        self._move_label(rollout, weight, kept)
        self._announcer.announce(rollout, events)
        return rollout.to_json()

    def _move_label(self, rollout: Rollout, weight: int | None, kept: LabelWeights | None) -> None:
        """The label's weights for ``weight``, its sticky header and shadow ``kept``."""
        spec = rollout.spec
        if weight is None:
            return
        if rollout.phase == PROMOTED:
            self._labels.set_label(spec.model, spec.label, spec.to)
            return
        versions = tuple(sorted(((spec.stable, 100 - weight), (spec.to, weight))))
        sticky, shadow = (kept.sticky, kept.shadow) if kept is not None else (None, None)
        weights = LabelWeights(versions, sticky, shadow)
        self._labels.set_label_weights(spec.model, spec.label, weights)

    def _serving(
        self, model: str, label: str, *, strict: bool = True
    ) -> tuple[int, LabelWeights | None]:
        """The version ``label`` serves now (the most weighted, if several), and its weights
        where it has them (their sticky header and shadow carry over)."""
        record = self._catalog.get_model(model)
        if record is None:
            raise ModelNotFound(f"model {model!r} is not in the catalog")
        if label in record.version_labels:
            return record.version_labels[label], None
        stored = record.label_weights.get(label)
        if stored is not None:
            weights = label_weights_from(stored)
            return max(weights.versions, key=lambda vw: vw[1])[0], weights
        if not strict:
            return 0, None
        raise InvalidInput(
            f"model {model!r} has no label {label!r} to roll out on; point it at the stable "
            f"version first: PUT /models/{model}/labels/{label or 'prod'}?version=1"
        )

    def _get(self, model: str, label: str) -> tuple[Rollout, int]:
        found = self._store.get(model, label)
        if found is None:
            raise ModelNotFound(f"label {label!r} of model {model!r} has had no rollout")
        return found

    def _active(self, model: str, label: str) -> tuple[Rollout, int]:
        rollout, revision = self._get(model, label)
        if rollout.phase not in (PROGRESSING, PAUSED):
            raise Conflict(f"the rollout of label {label!r} is {rollout.phase}; nothing to move")
        return rollout, revision
