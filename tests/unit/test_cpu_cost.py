"""Cost per model in a long-running server: the process's CPU seconds of each period, split
among the versions by their execution time in it; written as EMF lines."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

from lambdaserve.metrics.cpu_cost import CpuCost, CpuCostMetrics, emf_lines


def stats_of(executions: dict[tuple[str, str], int]) -> SimpleNamespace:
    entries = [
        {
            "name": name,
            "version": version,
            "batch_stats": [
                {
                    "batch_size": 1,
                    "compute_input": {"count": 1, "ns": 0},
                    "compute_infer": {"count": 1, "ns": ns},
                    "compute_output": {"count": 1, "ns": 0},
                }
            ],
        }
        for (name, version), ns in executions.items()
    ]
    return SimpleNamespace(snapshot=lambda: {"model_stats": entries})


def test_each_periods_cpu_goes_to_the_versions_that_computed_in_it():
    # Given a process whose clock and statistics move between periods
    clock = iter([10.0, 13.0, 14.0, 20.0])
    periods = iter(
        [
            {("a", "1"): 100, ("b", "1"): 200},  # a ran 1/3, b 2/3 of the first period
            {("a", "1"): 100, ("b", "1"): 200},  # nothing ran: the second is nobody's
            {("a", "1"): 500, ("b", "1"): 200},  # only a ran in the third
        ]
    )
    current = {"stats": stats_of({})}

    def stats() -> SimpleNamespace:
        return current["stats"]

    cost = CpuCost(stats, cpu=lambda: next(clock))  # type: ignore[arg-type]
    # When three periods close
    shares = []
    for executions in periods:
        current["stats"] = stats_of(executions)
        shares.append(cost.update())
    # Then the CPU seconds are split by execution time, and idle CPU is not attributed
    assert shares[0] == {("a", "1"): 1.0, ("b", "1"): 2.0}
    assert shares[1] == {}
    assert shares[2] == {("a", "1"): 6.0}
    assert dict(cost.totals) == {("a", "1"): 7.0, ("b", "1"): 2.0}


def test_the_shares_are_emf_lines_and_a_prometheus_counter():
    # Given a share for one version
    out = io.StringIO()
    emf_lines({("a", "1"): 0.25}, "lambdaserve-serve", out)
    [line] = [json.loads(text) for text in out.getvalue().splitlines()]
    # Then the EMF line names the metric, its unit and the dimensions the dashboard reads
    metric = line["_aws"]["CloudWatchMetrics"][0]
    assert metric["Metrics"] == [{"Name": "CpuSeconds", "Unit": "Seconds"}]
    assert ["model", "version", "service"] in metric["Dimensions"]
    assert (line["model"], line["version"], line["CpuSeconds"]) == ("a", "1", 0.25)
    # and a scrape reads the totals as a counter
    clock = iter([0.0, 2.0])
    cost = CpuCost(lambda: stats_of({("a", "1"): 5}), cpu=lambda: next(clock))  # type: ignore[arg-type,return-value]
    [family] = CpuCostMetrics(cost).collect()
    [sample] = [s for s in family.samples if s.name.endswith("_total")]
    assert sample.labels == {"model": "a", "version": "1"} and sample.value == 2.0
