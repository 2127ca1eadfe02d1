"""One measurement of a step: the new version against the stable one over one window, from
the fleet's tallies, classed as Argo Rollouts classes a measurement (Successful, Failed,
Inconclusive, Error). Too few requests is Inconclusive, never Failed: missing data is not
evidence; a store that cannot be read is Error."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lambdaserve.metrics.tallies import Tally
from lambdaserve.rollouts.spec import Analysis

SUCCESSFUL, FAILED, INCONCLUSIVE, ERROR = "Successful", "Failed", "Inconclusive", "Error"


@dataclass(frozen=True)
class Side:
    """One version's figures in a window."""

    requests: int
    failures: int
    error_rate: float
    p99_ms: float | None

    @classmethod
    def of(cls, tally: Tally) -> Side:
        return cls(tally.requests, tally.failures, tally.error_rate, tally.percentile_ms(99))

    def to_json(self) -> dict[str, Any]:
        rate = round(self.error_rate, 4)
        p99 = None if self.p99_ms is None else round(self.p99_ms, 3)
        return {"requests": self.requests, "failures": self.failures, "error_rate": rate} | {
            "p99_ms": p99
        }


@dataclass(frozen=True)
class Measurement:
    phase: str
    reason: str
    start: int  # the window, epoch seconds [start, end)
    end: int
    canary: Side | None = None
    stable: Side | None = None

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {"phase": self.phase, "reason": self.reason}
        document |= {"window": [self.start, self.end]}
        if self.canary is not None:
            document["canary"] = self.canary.to_json()
        if self.stable is not None:
            document["stable"] = self.stable.to_json()
        return document


def judge(gates: Analysis, canary: Tally, stable: Tally, start: int, end: int) -> Measurement:
    """Compare the canary's window with the stable version's. The stable side counts only
    when it has ``min_samples`` requests of its own (at a step of 100 it has none): below
    that, the canary is held to the floors alone."""
    new, old = Side.of(canary), Side.of(stable)

    def measured(phase: str, reason: str) -> Measurement:
        return Measurement(phase, reason, start, end, new, old)

    if new.requests < gates.min_samples:
        return measured(
            INCONCLUSIVE,
            f"{new.requests} requests reached the new version; min_samples is {gates.min_samples}",
        )
    compared = old.requests >= gates.min_samples
    error_bound = max(
        gates.max_error_rate, old.error_rate * gates.error_rate_ratio if compared else 0
    )
    if new.error_rate > error_bound:
        return measured(
            FAILED,
            f"error rate {new.error_rate:.2%} is above {error_bound:.2%} (stable "
            f"{old.error_rate:.2%} x {gates.error_rate_ratio}, floor {gates.max_error_rate:.2%})",
        )
    stable_p99 = old.p99_ms if compared and old.p99_ms is not None else 0.0
    p99_bound = max(gates.max_p99_ms, stable_p99 * gates.p99_ratio)
    if new.p99_ms is not None and new.p99_ms > p99_bound:
        return measured(
            FAILED,
            f"p99 {new.p99_ms:.1f} ms is above {p99_bound:.1f} ms (stable {stable_p99:.1f} ms "
            f"x {gates.p99_ratio}, floor {gates.max_p99_ms} ms)",
        )
    return measured(SUCCESSFUL, "within the gates")


def unmeasured(reason: str, start: int, end: int) -> Measurement:
    """The tallies could not be read: an Error measurement (Argo's provider error)."""
    return Measurement(ERROR, reason, start, end)
