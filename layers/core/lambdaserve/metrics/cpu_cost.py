"""Cost per model in a long-running server: the process's CPU seconds, split among the
versions it ran in proportion to their execution time (Triton's ``batch_stats`` compute
durations: one per execution, however many requests it batched).

One process serves many models and the operating system counts its CPU as one figure, as
Lambda bills one function; so, as ``emf`` splits an invocation's GB-seconds, each period's
CPU time goes to the versions that computed in it. CPU spent in a period when nothing
computed (idle polling, health checks) is nobody's and is not attributed. Model code in
worker processes is not in this process's figure: those workers' memory is on
``/metrics`` already (``nv_model_worker_*``); their CPU is not counted here.

``CpuCost.update`` closes a period: on each ``/metrics`` scrape, and every minute for the
EMF line a ``serve`` task writes (``CpuSeconds``, on the dashboard beside Lambda's
``ComputeGbSeconds``).
"""

from __future__ import annotations

import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any, TextIO

import orjson
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from lambdaserve.metrics.stats import StatsRegistry

CPU_SECONDS = "lambdaserve_model_cpu_seconds"
CPU_SECONDS_DOC = (
    "This process's CPU seconds attributed to each model version, in proportion to its "
    "execution time in each period (cost per model in a long-running server)"
)
EMF_METRIC = "CpuSeconds"
Key = tuple[str, str]


class CpuCost:
    """``stats``: the server's statistics; ``cpu``: the process's CPU seconds so far."""

    def __init__(
        self,
        stats: Callable[[], StatsRegistry],
        cpu: Callable[[], float] = time.process_time,
    ) -> None:
        self._stats = stats
        self._cpu = cpu
        self._lock = threading.Lock()
        self._last_cpu = cpu()
        self._last_compute: dict[Key, int] = {}
        self.totals: dict[Key, float] = defaultdict(float)

    def update(self) -> dict[Key, float]:
        """Close the period since the last call: each version's share of its CPU seconds
        (added to ``totals``, and returned)."""
        compute = {
            (entry["name"], entry["version"]): _execution_ns(entry)
            for entry in self._stats().snapshot()["model_stats"]
        }
        with self._lock:
            now = self._cpu()
            spent, self._last_cpu = max(now - self._last_cpu, 0.0), now
            ran = {k: ns - self._last_compute.get(k, 0) for k, ns in compute.items()}
            ran = {k: ns for k, ns in ran.items() if ns > 0}
            self._last_compute = compute
            total = sum(ran.values())
            shares = {k: spent * ns / total for k, ns in ran.items()} if total else {}
            for key, seconds in shares.items():
                self.totals[key] += seconds
            return shares


def _execution_ns(entry: dict[str, Any]) -> int:
    return sum(
        batch[part]["ns"]
        for batch in entry["batch_stats"]
        for part in ("compute_input", "compute_infer", "compute_output")
    )


class CpuCostMetrics(Collector):
    """``lambdaserve_model_cpu_seconds_total{model,version}`` on ``/metrics``."""

    def __init__(self, cost: CpuCost) -> None:
        self._cost = cost

    def collect(self) -> Iterable[Metric]:
        self._cost.update()
        family = CounterMetricFamily(CPU_SECONDS, CPU_SECONDS_DOC, labels=["model", "version"])
        for (model, version), seconds in sorted(self._cost.totals.items()):
            family.add_metric([model, version], seconds)
        yield family


def emf_lines(shares: dict[Key, float], service: str, stream: TextIO | None = None) -> None:
    """One EMF line per version with a share (``CpuSeconds``), as ``emf`` writes Lambda's."""
    timestamp = int(time.time() * 1000)
    directive = {
        "Namespace": "lambdaserve",
        "Dimensions": [["model", "version", "service"], ["service"]],
        "Metrics": [{"Name": EMF_METRIC, "Unit": "Seconds"}],
    }
    lines = [
        orjson.dumps(
            {
                "_aws": {"Timestamp": timestamp, "CloudWatchMetrics": [directive]},
                "model": model,
                "version": version,
                "service": service,
                EMF_METRIC: round(seconds, 6),
            }
        ).decode()
        for (model, version), seconds in sorted(shares.items())
    ]
    if lines:
        out = stream or sys.stdout
        out.write("\n".join(lines) + "\n")
        out.flush()
