"""A rollout's analysis and moves, pure (rollouts.spec, rollouts.analysis, rollouts.progress,
metrics.tallies): Argo's limits tripping on ``>``, missing data inconclusive, floors and
ratios against the stable version, steps after bake, promotion and rollback."""

from __future__ import annotations

import pytest

from lambdaserve.errors import InvalidInput
from lambdaserve.metrics.tallies import Tally, bucket_bound_ms, bucket_of
from lambdaserve.rollouts.analysis import (
    ERROR,
    FAILED,
    INCONCLUSIVE,
    SUCCESSFUL,
    Measurement,
    judge,
    unmeasured,
)
from lambdaserve.rollouts.progress import (
    PAUSED,
    PROGRESSING,
    PROMOTED,
    ROLLED_BACK,
    begin,
    rollout_from,
    tick,
)
from lambdaserve.rollouts.spec import Analysis, parse_rollout

GATES = Analysis(interval_seconds=10, min_samples=20, inconclusive_limit=2)


def tally(requests: int, failures: int = 0, ms: float = 5.0) -> Tally:
    return Tally(requests, failures, {bucket_of(ms): requests})


def spec(**analysis: object):
    body = {"label": "prod", "to": 2, "steps": [10, 50], "bake_seconds": 30}
    return parse_rollout("m", body | {"analysis": {"interval_seconds": 10} | analysis}, 1)


def test_a_spec_ends_at_100_and_refuses_what_it_cannot_do():
    # Given steps that stop short of 100
    # When the body is parsed
    parsed = spec(min_samples=5)
    # Then the new version ends alone, the defaults fill the rest
    assert parsed.steps == (10, 50, 100) and parsed.analysis.min_samples == 5
    assert parsed.analysis.failure_limit == 0
    # and bodies it cannot act on are refused, saying which field
    for body, said in [
        ({"label": "prod", "to": 1}, "already serves"),
        ({"label": "prod", "to": 2, "steps": [0, 100]}, "steps"),
        ({"label": "prod", "to": 2, "bake_seconds": -1}, "bake_seconds"),
        ({"label": "prod", "to": 2, "analysis": {"p99_ratio": "x"}}, "p99_ratio"),
        ({"label": "prod", "to": 2, "analysis": {"min_samples": 1.5}}, "whole number"),
        ({"label": "", "to": 2}, '"label"'),
    ]:
        with pytest.raises(InvalidInput, match=said):
            parse_rollout("m", body, 1)


def test_too_few_requests_is_inconclusive_never_failed():
    # Given a canary with 19 requests, every one failed (min_samples 20)
    # When the window is judged
    measured = judge(GATES, tally(19, 19), tally(500), 0, 10)
    # Then it is Inconclusive: missing data is not evidence
    assert measured.phase == INCONCLUSIVE and "min_samples" in measured.reason


def test_error_rate_fails_above_the_larger_of_stable_times_ratio_and_the_floor():
    # Given a stable version failing 4% (ratio 2: the canary may fail up to 8%)
    stable = tally(1000, 40)
    # When canaries failing 7% and 9% are judged
    # Then 7% passes and 9% fails, saying both bounds
    assert judge(GATES, tally(100, 7), stable, 0, 10).phase == SUCCESSFUL
    failed = judge(GATES, tally(100, 9), stable, 0, 10)
    assert failed.phase == FAILED and "8.00%" in failed.reason
    # and against a stable version with no errors, the floor (1%) decides
    assert judge(GATES, tally(1000, 10), tally(1000), 0, 10).phase == SUCCESSFUL
    assert judge(GATES, tally(1000, 11), tally(1000), 0, 10).phase == FAILED


def test_p99_is_compared_with_stable_unless_stable_has_too_few_requests():
    # Given a stable p99 of about 100 ms (ratio 1.5, floor 50 ms)
    # When a canary of about 200 ms is judged
    slow = judge(GATES, tally(100, ms=200), tally(100, ms=100), 0, 10)
    # Then it fails on p99
    assert slow.phase == FAILED and "p99" in slow.reason
    # and a stable side under min_samples is left out: the floor alone applies
    assert judge(GATES, tally(100, ms=40), tally(5, ms=1), 0, 10).phase == SUCCESSFUL


def test_a_percentile_reads_within_a_bucket():
    # Given 99 fast requests and 1 slow one
    latency = {bucket_of(2.0): 99, bucket_of(900.0): 1}
    # When p99 and p100 are read
    # Then p99 is the fast bucket's bound (within 20% of 2 ms), p100 the slow one's
    p99 = Tally(100, 0, latency).percentile_ms(99)
    assert p99 is not None and 2.0 <= p99 < 2.4
    assert Tally(100, 0, latency).percentile_ms(100) == bucket_bound_ms(bucket_of(900.0))
    assert Tally().percentile_ms(99) is None


def measuring(*phases: str):
    found = list(phases)

    def measure(start: int, end: int) -> Measurement:
        phase = found.pop(0)
        if phase == ERROR:
            return unmeasured("store down", start, end)
        canary = {SUCCESSFUL: tally(100), FAILED: tally(100, 50), INCONCLUSIVE: tally(1)}[phase]
        return judge(Analysis(min_samples=20), canary, tally(100), start, end)

    return measure


def test_a_failed_measurement_rolls_back_at_once():
    # Given a rollout at its first step (10%)
    rollout, weight, events = begin(spec(), 1000.0)
    assert (rollout.phase, weight) == (PROGRESSING, 10)
    assert [e.kind for e in events] == ["RolloutStepStarted", "BakeStarted"]
    # When a tick before the interval has passed
    # Then nothing is measured and nothing moves
    assert tick(rollout, 1005.0, measuring())[1:] == (None, [])
    # When the first window's measurement fails (failure_limit 0: more than 0 trips)
    rolled, weight, events = tick(rollout, 1010.0, measuring(FAILED))
    # Then the new version's weight is 0, and the status and events say why
    assert (rolled.phase, weight) == (ROLLED_BACK, 0)
    assert rolled.rolled_back is not None and "error rate" in rolled.rolled_back["reason"]
    assert rolled.rolled_back["measurement"]["canary"]["error_rate"] == 0.5
    assert [e.kind for e in events] == ["RollbackStarted", "RollbackCompleted"]
    # and it survives the catalog's round trip
    assert rollout_from(rolled.to_json()) == rolled


def test_a_step_moves_on_after_bake_with_a_success_and_the_last_promotes():
    # Given a rollout whose step bakes 30 s
    rollout, _, _ = begin(spec(), 1000.0)
    # When a successful window closes before the bake ends
    rollout, weight, _ = tick(rollout, 1010.0, measuring(SUCCESSFUL))
    # Then it holds
    assert (rollout.step, weight) == (0, None)
    # When the bake has passed
    rollout, weight, events = tick(rollout, 1030.0, measuring(SUCCESSFUL))
    # Then the next step's weight is set, its window starting afresh
    assert (rollout.step, weight, rollout.counts) == (1, 50, {})
    assert [e.kind for e in events] == ["RolloutStepStarted", "BakeStarted"]
    rollout, weight, _ = tick(rollout, 1060.0, measuring(SUCCESSFUL))
    assert weight == 100
    # and after the last step, it is promoted
    rollout, weight, events = tick(rollout, 1090.0, measuring(SUCCESSFUL))
    assert (rollout.phase, weight, events[0].kind) == (PROMOTED, 100, "RolloutPromoted")


def test_inconclusive_measurements_over_the_limit_pause_and_errors_roll_back():
    # Given a rollout allowing 2 inconclusive measurements
    rollout, _, _ = begin(spec(inconclusive_limit=2), 1000.0)
    # When three windows have too few requests
    for second in (1010.0, 1020.0):
        rollout, _, _ = tick(rollout, second, measuring(INCONCLUSIVE))
        assert rollout.phase == PROGRESSING
    rollout, weight, events = tick(rollout, 1030.0, measuring(INCONCLUSIVE))
    # Then the third pauses it (more than the limit), leaving the weights as they are
    assert (rollout.phase, weight, events[0].kind) == (PAUSED, None, "RolloutPaused")
    # And five analysis errors in a row (the limit is 4) roll a rollout back
    rollout, _, _ = begin(spec(), 1000.0)
    for n in range(4):
        rollout, weight, _ = tick(rollout, 1010.0 + 10 * n, measuring(ERROR))
        assert weight is None
    rollout, weight, _ = tick(rollout, 1050.0, measuring(ERROR))
    assert (rollout.phase, weight) == (ROLLED_BACK, 0)
