"""Payload capture's own health on ``/metrics``: the records sampled, dropped because the
backlog was full, and sampled but never written (their write failed). Capture never fails
or slows an answer, so this is where a user sees what it gave up."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

RECORDS = "lambdaserve_data_capture_records"
RECORDS_DOC = (
    "Payload capture records of this process by outcome: captured (queued for S3), dropped "
    "(the backlog was full) and failed (queued, and never written)"
)


class CaptureMetrics(Collector):
    """``counts``: the process's capture counts (``DataCapture.snapshot``), read per scrape."""

    def __init__(self, counts: Callable[[], Mapping[str, int]]) -> None:
        self._counts = counts

    def collect(self) -> Iterable[Metric]:
        family = CounterMetricFamily(RECORDS, RECORDS_DOC, labels=["outcome"])
        for outcome, count in sorted(self._counts().items()):
            family.add_metric([outcome], float(count))
        yield family
