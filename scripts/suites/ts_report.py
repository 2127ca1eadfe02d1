"""Outcomes of the peer suites and their table: passed, failed, refused by design, n/a."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

OUTCOMES = ("passed", "failed", "refused-by-design", "n/a")


@dataclass(frozen=True)
class Outcome:
    suite: str
    name: str
    outcome: str  # one of OUTCOMES
    reason: str = ""


@dataclass
class SuiteRun:
    suite: str
    outcomes: list[Outcome] = field(default_factory=list)
    absent: str = ""  # why the suite did not run
    notes: list[str] = field(default_factory=list)  # transformations, publishing

    def add(self, name: str, outcome: str, reason: str = "") -> None:
        self.outcomes.append(Outcome(self.suite, name, outcome, reason))

    def count(self, outcome: str) -> int:
        return sum(1 for o in self.outcomes if o.outcome == outcome)


def print_table(runs: list[SuiteRun], verbose: bool = False) -> None:
    width = max([len(r.suite) for r in runs] + [5])
    print(f"\n{'suite':<{width}} | passed | failed | refused-by-design | n/a")
    print(f"{'-' * width}-|--------|--------|-------------------|-----")
    for run in runs:
        if run.absent:
            print(f"{run.suite:<{width}} | ABSENT: {run.absent}")
            continue
        ok, failed, refused, na = (run.count(o) for o in OUTCOMES)
        print(f"{run.suite:<{width}} | {ok:>6} | {failed:>6} | {refused:>17} | {na:>3}")
    for run in runs:
        for kind in ("failed",) + (("refused-by-design", "n/a") if verbose else ()):
            listed = [o for o in run.outcomes if o.outcome == kind]
            if listed:
                print(f"\n{run.suite}: {kind}")
                for o in listed:
                    print(f"  - {o.name}: {o.reason}")


def write_json(runs: list[SuiteRun], path: Path) -> None:
    body = [
        {
            "suite": r.suite,
            "absent": r.absent,
            "counts": {o: r.count(o) for o in OUTCOMES},
            "notes": r.notes,
            "outcomes": [asdict(o) for o in r.outcomes],
        }
        for r in runs
    ]
    path.write_text(json.dumps(body, indent=2))
