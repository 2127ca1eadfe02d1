"""One ``/metrics`` for several worker processes: every sample summed over the workers.

prometheus_client's multiprocess mode counts in shared files on the request path; the
families here are read from each process's ``StatsRegistry`` when scraped instead (nothing
is counted per request), so each worker writes its samples to a file of its own every
second and the worker answering a scrape adds the others' files to its own live samples.
Counters and the pending-request gauge are sums over processes, so summing is exact; the
other workers' part is at most one write interval old. A dead worker's file stays, so the
sums never fall when the supervisor replaces it (its last interval is lost).

``lambdaserve_worker_inference_request_success`` (label ``worker``: the pid) shows how the
kernel spread the requests over the workers.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric, UnknownMetricFamily

logger = logging.getLogger(__name__)
WORKER_SUCCESS = "lambdaserve_worker_inference_request_success"
WORKER_SUCCESS_DOC = "Inference requests that succeeded, by worker process (pid)"
_SUCCESS = "nv_inference_request_success"
Families = list[dict[str, Any]]


def families_of(registry: CollectorRegistry) -> Families:
    """The registry's samples as plain data (what a worker writes)."""
    return [
        {
            "name": family.name,
            "type": family.type,
            "doc": family.documentation,
            "samples": [[s.name, s.labels, s.value] for s in family.samples],
        }
        for family in registry.collect()
    ]


class SummedMetrics:
    """A collector: this process's families live, plus the other workers' last files."""

    def __init__(self, own: CollectorRegistry, files: Callable[[], Iterable[Path]]) -> None:
        self._own = own
        self._files = files

    def collect(self) -> Iterable[Metric]:
        mine = os.getpid()
        by_worker: list[tuple[int, Families]] = [(mine, families_of(self._own))]
        for path in self._files():
            pid = int(path.stem.rsplit("-", 1)[1])
            if pid != mine:
                by_worker.append((pid, _read(path)))
        yield from _summed(by_worker)
        per_worker = UnknownMetricFamily(WORKER_SUCCESS, WORKER_SUCCESS_DOC, labels=["worker"])
        for pid, families in sorted(by_worker):
            total = sum(
                value
                for family in families
                if family["name"] == _SUCCESS
                for _, _, value in family["samples"]
            )
            per_worker.add_metric([str(pid)], float(total))
        yield per_worker


def _summed(by_worker: list[tuple[int, Families]]) -> Iterable[Metric]:
    merged: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for _, families in by_worker:
        for family in families:
            name = family["name"]
            if name not in merged:
                merged[name] = Metric(name, family["doc"], family["type"])
                values[name] = {}
            for sample, labels, value in family["samples"]:
                key = (sample, tuple(sorted(labels.items())))
                before = values[name].get(key)
                if before is None:
                    values[name][key] = value
                elif sample.endswith("_created"):  # a time, not a count: the earliest
                    values[name][key] = min(before, value)
                else:
                    values[name][key] = before + value
    for name, metric in merged.items():
        for (sample, labels), value in values[name].items():
            metric.add_sample(sample, dict(labels), value)
        yield metric


def _read(path: Path) -> Families:
    try:
        families: Families = json.loads(path.read_bytes())
    except (OSError, ValueError):  # written atomically: only a vanished file lands here
        return []
    return families


def publish_every(
    interval_s: float, registry: CollectorRegistry, write: Callable[[bytes], None]
) -> threading.Thread:
    """Write the registry's samples every ``interval_s`` in a daemon thread."""

    def run() -> None:
        while True:
            try:
                write(json.dumps(families_of(registry)).encode())
            except Exception:  # a scrape's sums are one interval older; serving goes on
                logger.exception("could not write this worker's metrics")
            threading.Event().wait(interval_s)

    thread = threading.Thread(target=run, name="metrics-publish", daemon=True)
    thread.start()
    return thread
