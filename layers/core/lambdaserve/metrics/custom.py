"""Metrics that model code records (a TorchServe handler's ``context.metrics``), kept in this
process and exposed on ``/metrics`` beside Triton's families.

TorchServe's frontend turns a handler's metric lines into Prometheus series by type: a
counter adds, a gauge sets, a histogram observes. The same here, with the metric's own name
and dimensions as labels, so a dashboard over TorchServe's custom metrics reads these.

A ``pb_utils.MetricFamily`` counter is written as Triton writes it: its samples under the
family's own name (``requests_process_latency_ns{...}``, no ``_total``), its ``# HELP`` and
``# TYPE ... counter`` lines under that name too (``metrics.prometheus.exposition``).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client.core import Metric

COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"


@dataclass(frozen=True)
class Recorded:
    """One value model code recorded, as a listener hears it."""

    name: str
    kind: str
    unit: str
    labels: tuple[str, ...]
    values: tuple[str, ...]
    value: float


Listener = Callable[[Recorded], None]
_INVALID = re.compile(r"[^a-zA-Z0-9_:]")


@dataclass
class _Series:
    kind: str
    unit: str
    labels: tuple[str, ...]
    description: str = ""
    own_name: bool = False  # a counter's samples named as the family (Triton's), not _total
    values: dict[tuple[str, ...], list[float]] = field(default_factory=dict)


class CustomMetrics:
    """Every custom metric of the process: recorded from any thread, read when scraped."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._series: dict[str, _Series] = {}
        self._listeners: list[Listener] = []
        self._elsewhere: Callable[..., None] | None = None

    def add_listener(self, listener: Listener) -> None:
        """Also tell ``listener`` each value (the infer function writes them as EMF)."""
        with self._lock:
            self._listeners.append(listener)

    def send_elsewhere(self, sink: Callable[..., None]) -> None:
        """Hand every value to ``sink`` (``record``'s arguments) instead of keeping it: a
        worker child sends its code's metrics to the serving process, which keeps them."""
        self._elsewhere = sink

    def record(
        self,
        name: str,
        *,
        kind: str,
        unit: str,
        labels: Sequence[str],
        values: Sequence[str],
        value: float,
        description: str = "",
        own_name: bool = False,
    ) -> None:
        """Add (counter), set (gauge) or observe (histogram) ``value`` for one label set;
        ``description`` (a MetricFamily's) is the series' ``# HELP`` line; ``own_name``: a
        counter's samples carry its own name, as Triton's (TorchServe's gain ``_total``)."""
        if self._elsewhere is not None:
            self._elsewhere(
                name,
                kind=kind,
                unit=unit,
                labels=labels,
                values=values,
                value=value,
                description=description,
                own_name=own_name,
            )
            return
        if len(labels) != len(values):
            raise ValueError(f"metric {name!r} has dimensions {list(labels)}, got {list(values)}")
        with self._lock:
            series = self._series.setdefault(
                name, _Series(kind, unit, tuple(labels), description, own_name)
            )
            if series.labels != tuple(labels) or series.kind != kind:
                raise ValueError(
                    f"metric {name!r} was first recorded as a {series.kind} with dimensions "
                    f"{list(series.labels)}; record it the same way every time"
                )
            current = series.values.setdefault(tuple(values), [0.0, 0.0])
            if kind == GAUGE:
                current[0] = value
            elif kind == HISTOGRAM:
                current[0] += 1
                current[1] += value
            else:
                current[0] += value
            listeners = list(self._listeners)
        if listeners:
            recorded = Recorded(name, kind, unit, tuple(labels), tuple(values), value)
            for listener in listeners:
                listener(recorded)

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        # imported when scraped: the infer function records, and never scrapes
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            Metric,
            SummaryMetricFamily,
        )

        with self._lock:
            snapshot = {
                name: (
                    s.kind,
                    s.unit,
                    s.labels,
                    s.description,
                    s.own_name,
                    {k: list(v) for k, v in s.values.items()},
                )
                for name, s in self._series.items()
            }
        for name, (kind, unit, labels, description, own_name, values) in sorted(snapshot.items()):
            exposed = _INVALID.sub("_", name)
            # a MetricFamily's own description, as Triton writes it; TorchServe's metrics
            # have none, so say what they are
            documentation = (
                description or f"{name} ({unit or 'no unit'}), recorded by the model's code"
            )
            if kind == HISTOGRAM:
                summary = SummaryMetricFamily(exposed, documentation, labels=list(labels))
                for key, (count, total) in values.items():
                    summary.add_metric(list(key), int(count), total)
                yield summary
                continue
            if kind == COUNTER and own_name:
                counter = Metric(exposed, documentation, COUNTER)
                for key, (number, _) in values.items():
                    counter.add_sample(exposed, dict(zip(labels, key, strict=True)), number)
                yield counter
                continue
            family: CounterMetricFamily | GaugeMetricFamily
            if kind == GAUGE:
                family = GaugeMetricFamily(exposed, documentation, labels=list(labels))
            else:
                family = CounterMetricFamily(exposed, documentation, labels=list(labels))
            for key, (number, _) in values.items():
                family.add_metric(list(key), number)
            yield family


# One per process, as TorchServe's frontend keeps one per server
CUSTOM_METRICS = CustomMetrics()
