"""What a rollout is asked to do, checked where it comes in (``POST /models/{m}/rollouts``):
the label it moves, the version it moves to, its steps and bake time, and the analysis that
judges each step, with Argo Rollouts' limits."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, TypeGuard

from lambdaserve.errors import InvalidInput

EXAMPLE = (
    '{"label": "prod", "to": 2, "steps": [10, 50, 100], "bake_seconds": 300, '
    '"analysis": {"interval_seconds": 60, "min_samples": 100}}'
)


@dataclass(frozen=True)
class Analysis:
    """The gates of one measurement, relative to the stable version with absolute floors.
    A gate fails when the canary is above the larger of ``stable * ratio`` and the floor,
    so a stable version with no errors does not fail a canary for one error in a thousand.
    Limits trip on ``>`` (Argo's): ``failure_limit: 0`` rolls back on the first failure."""

    interval_seconds: int = 60
    min_samples: int = 100  # each side's requests in the window; fewer: inconclusive
    error_rate_ratio: float = 2.0
    max_error_rate: float = 0.01  # the floor: an error rate this low never fails a gate
    p99_ratio: float = 1.5
    max_p99_ms: float = 50.0  # the floor for p99
    failure_limit: int = 0
    inconclusive_limit: int = 5  # more inconclusive measurements in a step: paused
    consecutive_error_limit: int = 4  # more analysis errors in a row: rolled back

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RolloutSpec:
    model: str
    label: str
    to: int
    stable: int  # the version the label served alone when the rollout began
    steps: tuple[int, ...]  # the new version's weight at each step, the last 100
    bake_seconds: int
    analysis: Analysis

    def to_json(self) -> dict[str, Any]:
        document = asdict(self)
        document["steps"] = list(self.steps)
        return document


def spec_from(stored: Mapping[str, Any]) -> RolloutSpec:
    """A spec as the catalog stored it (checked when the rollout began)."""
    return RolloutSpec(
        model=stored["model"],
        label=stored["label"],
        to=int(stored["to"]),
        stable=int(stored["stable"]),
        steps=tuple(int(s) for s in stored["steps"]),
        bake_seconds=int(stored["bake_seconds"]),
        analysis=Analysis(**stored["analysis"]),
    )


def label_of(body: Mapping[str, Any]) -> str:
    """The label a POST body moves (read first: its current version is the stable one)."""
    label = body.get("label")
    if not isinstance(label, str) or not label:
        raise InvalidInput(f'"label" names the version label to move; e.g. {EXAMPLE}')
    return label


def parse_rollout(model: str, body: Mapping[str, Any], stable: int) -> RolloutSpec:
    """A POST body, or InvalidInput saying what is wrong, with an example."""
    unknown = sorted(set(body) - {"label", "to", "steps", "bake_seconds", "analysis"})
    if unknown:
        raise InvalidInput(f"unknown field(s) {unknown}; a rollout is e.g. {EXAMPLE}")
    label, to = label_of(body), body.get("to")
    if not _whole(to) or to < 1:
        raise InvalidInput(f'"to" is the version to roll out, a number >= 1; e.g. {EXAMPLE}')
    if to == stable:
        raise InvalidInput(f"label {label!r} already serves version {to}")
    steps = body.get("steps", [10, 50, 100])
    if (
        not isinstance(steps, list)
        or not steps
        or not all(_whole(s) and 0 < s <= 100 for s in steps)
        or any(a >= b for a, b in itertools.pairwise(steps))
    ):
        raise InvalidInput(f'"steps" are rising weights in 1..100, e.g. [10, 50, 100]; got {steps}')
    if steps[-1] != 100:
        steps = [*steps, 100]  # a rollout that completes ends with the new version alone
    bake = body.get("bake_seconds", 300)
    if not _whole(bake) or bake < 0:
        raise InvalidInput(f'"bake_seconds" is how long each step holds, >= 0; got {bake!r}')
    return RolloutSpec(model, label, to, stable, tuple(steps), bake, _analysis(body))


def _analysis(body: Mapping[str, Any]) -> Analysis:
    given = body.get("analysis", {})
    if not isinstance(given, Mapping):
        raise InvalidInput(f'"analysis" is an object; e.g. {EXAMPLE}')
    known = {f.name: f for f in fields(Analysis)}
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise InvalidInput(f"unknown analysis field(s) {unknown}; known: {sorted(known)}")
    for name, value in given.items():
        whole = known[name].type == "int"
        if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)):
            kind = "a whole number" if whole else "a number"
            raise InvalidInput(f"analysis.{name} must be {kind}; got {value!r}")
        if value < 0 or (name in ("interval_seconds", "min_samples") and value < 1):
            raise InvalidInput(f"analysis.{name} must be above 0; got {value!r}")
    return Analysis(**given)


def _whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
