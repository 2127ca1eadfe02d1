"""A rollout's life, as pure moves from one state to the next: begin, each tick of the
judge (measure the window that closed, then step on, pause, promote or roll back), and a
person's promote or abort. Each move says the new version's weight to set (None: leave the
label as it is) and the events to announce; ``rollouts.service`` applies them.

Argo Rollouts' semantics: failures above ``failure_limit`` roll back at once (the new
version's weight set to 0); inconclusive measurements above ``inconclusive_limit`` pause the
rollout for a person to promote or abort; analysis errors in a row above
``consecutive_error_limit`` roll back. A step moves on when its bake time has passed and at
least one of its measurements was Successful.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from lambdaserve.rollouts.analysis import ERROR, FAILED, INCONCLUSIVE, SUCCESSFUL, Measurement
from lambdaserve.rollouts.spec import RolloutSpec, spec_from

PROGRESSING, PAUSED, PROMOTED, ROLLED_BACK = "Progressing", "Paused", "Promoted", "RolledBack"
ABORTED = "Aborted"
ACTIVE = (PROGRESSING, PAUSED)
_KEPT = 20  # the measurements a status shows


@dataclass(frozen=True)
class Event:
    """One move, announced: ``RolloutStepStarted``, ``BakeStarted``, ``RolloutPromoted``,
    ``RollbackStarted``, ``RollbackCompleted``, ``RolloutPaused``."""

    kind: str
    trigger: str
    weight: int
    measurement: dict[str, Any] | None = None


@dataclass(frozen=True)
class Rollout:
    spec: RolloutSpec
    phase: str
    step: int
    step_started: float
    measured_until: int  # the next window starts here (epoch second)
    started_at: float
    updated_at: float
    counts: dict[str, int] = field(default_factory=dict)  # this step's measurements by phase
    consecutive_errors: int = 0
    measurements: tuple[dict[str, Any], ...] = ()
    message: str = ""
    rolled_back: dict[str, Any] | None = None

    @property
    def weight(self) -> int:
        """The new version's weight now."""
        if self.phase == PROMOTED:
            return 100
        if self.phase in (ROLLED_BACK, ABORTED):
            return 0
        return self.spec.steps[self.step]

    def to_json(self) -> dict[str, Any]:
        return {
            "spec": self.spec.to_json(),
            "phase": self.phase,
            "step": self.step,
            "weight": self.weight,
            "step_started": self.step_started,
            "measured_until": self.measured_until,
            "started_at": self.started_at,
            "updated_at": self.updated_at,
            "counts": dict(self.counts),
            "consecutive_errors": self.consecutive_errors,
            "measurements": list(self.measurements),
            "message": self.message,
            "rolled_back": self.rolled_back,
        }


def rollout_from(stored: dict[str, Any]) -> Rollout:
    return Rollout(
        spec=spec_from(stored["spec"]),
        phase=stored["phase"],
        step=int(stored["step"]),
        step_started=float(stored["step_started"]),
        measured_until=int(stored["measured_until"]),
        started_at=float(stored["started_at"]),
        updated_at=float(stored["updated_at"]),
        counts={k: int(v) for k, v in stored.get("counts", {}).items()},
        consecutive_errors=int(stored.get("consecutive_errors", 0)),
        measurements=tuple(stored.get("measurements", ())),
        message=stored.get("message", ""),
        rolled_back=stored.get("rolled_back"),
    )


Move = tuple[Rollout, int | None, list[Event]]


def begin(spec: RolloutSpec, now: float) -> Move:
    first = spec.steps[0]
    rollout = Rollout(spec, PROGRESSING, 0, now, int(now), now, now, message="step 1 baking")
    return rollout, first, _step_events(first, "started")


def tick(rollout: Rollout, now: float, measure: Callable[[int, int], Measurement]) -> Move:
    """The judge's tick: measure the window that closed, then move on if the step is done."""
    if rollout.phase != PROGRESSING:
        return rollout, None, []
    gates = rollout.spec.analysis
    end = int(now)
    if end - rollout.measured_until >= gates.interval_seconds:
        measured = measure(rollout.measured_until, end)
        rollout = _counted(rollout, measured, now)
        judged = measured.to_json()
        if rollout.counts.get(FAILED, 0) > gates.failure_limit:
            return roll_back(rollout, now, f"analysis failed: {measured.reason}", judged)
        if rollout.consecutive_errors > gates.consecutive_error_limit:
            reason = f"{rollout.consecutive_errors} analysis errors in a row: {measured.reason}"
            return roll_back(rollout, now, reason, judged)
        if rollout.counts.get(INCONCLUSIVE, 0) > gates.inconclusive_limit:
            message = (
                f"paused: {rollout.counts[INCONCLUSIVE]} inconclusive measurements "
                f"({measured.reason}); promote or abort it"
            )
            paused = replace(rollout, phase=PAUSED, message=message)
            return paused, None, [Event("RolloutPaused", message, rollout.weight, judged)]
    baked = now - rollout.step_started >= rollout.spec.bake_seconds
    if baked and rollout.counts.get(SUCCESSFUL, 0) >= 1:
        return step_on(rollout, now, "bake passed with a successful analysis")
    return rollout, None, []


def step_on(rollout: Rollout, now: float, trigger: str) -> Move:
    """The next step, or promotion after the last (also a person's ``promote``)."""
    last = rollout.measurements[-1] if rollout.measurements else None
    if rollout.step + 1 >= len(rollout.spec.steps):
        promoted = replace(rollout, phase=PROMOTED, updated_at=now, message=f"promoted: {trigger}")
        return promoted, 100, [Event("RolloutPromoted", trigger, 100, last)]
    step = rollout.step + 1
    weight = rollout.spec.steps[step]
    moved = replace(
        rollout,
        phase=PROGRESSING,
        step=step,
        step_started=now,
        measured_until=int(now),
        updated_at=now,
        counts={},
        consecutive_errors=0,
        message=f"step {step + 1} baking",
    )
    return moved, weight, _step_events(weight, trigger, last)


def promote_fully(rollout: Rollout, now: float, trigger: str) -> Move:
    final = replace(rollout, step=len(rollout.spec.steps) - 1)
    return step_on(final, now, trigger)


def roll_back(
    rollout: Rollout, now: float, reason: str, measurement: dict[str, Any] | None, *, by: str = ""
) -> Move:
    """The new version's weight to 0 at once; the status keeps why."""
    phase = ABORTED if by else ROLLED_BACK
    rolled = replace(
        rollout,
        phase=phase,
        updated_at=now,
        message=f"rolled back: {reason}",
        rolled_back={"at": now, "reason": reason, "measurement": measurement},
    )
    events = [
        Event("RollbackStarted", reason, rollout.weight, measurement),
        Event("RollbackCompleted", reason, 0, measurement),
    ]
    return rolled, 0, events


def _counted(rollout: Rollout, measured: Measurement, now: float) -> Rollout:
    counts = {**rollout.counts, measured.phase: rollout.counts.get(measured.phase, 0) + 1}
    errors = rollout.consecutive_errors + 1 if measured.phase == ERROR else 0
    return replace(
        rollout,
        counts=counts,
        consecutive_errors=errors,
        measured_until=measured.end,
        updated_at=now,
        measurements=(*rollout.measurements, measured.to_json())[-_KEPT:],
    )


def _step_events(weight: int, trigger: str, last: dict[str, Any] | None = None) -> list[Event]:
    return [
        Event("RolloutStepStarted", trigger, weight, last),
        Event("BakeStarted", trigger, weight),
    ]
