"""Triton's failure reasons and pending-request gauge, as /metrics writes them."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import numpy as np
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from lambdaserve.apps.metrics_route import queued_in
from lambdaserve.batching.dynamic_batcher import DynamicBatcher
from lambdaserve.batching.plan import BatchPolicy
from lambdaserve.errors import InferenceError, InvalidInput, RequestTimeout
from lambdaserve.metrics.prometheus import metrics_registry
from lambdaserve.metrics.stats import Execution, StatsRegistry
from lambdaserve.protocol.v2 import InferInput, InferRequest
from lambdaserve.serving.data_plane import InferenceDataPlane


def samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
    }


def test_failures_carry_triton_reasons_and_pending_counts_are_a_gauge():
    # Given one success and failures of each kind we have
    stats = StatsRegistry()
    stats.record_success("m", 1, Execution(1, 1, 0, 1, 1, 1))
    stats.record_failure("m", 1, 10, InferenceError("the model raised"))
    stats.record_failure("m", 1, 10, InvalidInput("wrong shape"))
    stats.record_failure("m", 1, 10, InvalidInput("wrong datatype"))
    stats.record_failure("m", 1, 10, RequestTimeout("deadline passed in the queue"))
    # and three requests waiting for version 1, two for a version not served yet
    registry = metrics_registry(lambda: stats, lambda: {("m", "1"): 3, ("m", "2"): 2})
    # When /metrics is written
    found = samples(generate_latest(registry))

    # Then failures are split by Triton's reasons, every reason present
    def failure(reason: str) -> float:
        labels = (("model", "m"), ("reason", reason), ("version", "1"))
        return found[("nv_inference_request_failure", labels)]

    assert [failure(r) for r in ("BACKEND", "OTHER", "REJECTED", "CANCELED")] == [1, 2, 1, 0]
    # and pending is a gauge per version
    pending = "nv_inference_pending_request_count"
    assert found[(pending, (("model", "m"), ("version", "1")))] == 3
    assert found[(pending, (("model", "m"), ("version", "2")))] == 2
    assert b"# TYPE nv_inference_pending_request_count gauge" in generate_latest(registry)


def test_requests_waiting_in_the_batcher_count_as_pending_on_their_version():
    # Given a batcher whose policy makes requests wait (a long queue delay, batch of 8)
    def execute(model, version, requests, queued_ns):
        raise AssertionError("nothing runs while the batch fills")

    async def in_thread(function, *args):
        return function(*args)

    server = SimpleNamespace(
        resolver=SimpleNamespace(resolve=lambda model, version: SimpleNamespace(version=4))
    )

    async def scenario() -> dict[tuple[str, str], int]:
        batcher = DynamicBatcher(execute, lambda m, v: BatchPolicy(8, 60.0), in_thread)
        data = np.zeros((1, 2), np.float32)
        request = InferRequest((InferInput("x", "FP32", data.shape, data),))
        waiting = [asyncio.ensure_future(batcher.submit("m", None, request)) for _ in range(3)]
        await asyncio.sleep(0.05)
        # When /metrics asks what is pending
        counts = queued_in(batcher, InferenceDataPlane(lambda: server))()  # type: ignore[arg-type,return-value]
        for task in waiting:
            task.cancel()
        return counts

    loop = asyncio.new_event_loop()
    try:
        counts = loop.run_until_complete(scenario())
    finally:
        loop.close()
    # Then the three are pending on the default version they will run on
    assert counts == {("m", "4"): 3}


def test_a_metric_family_counter_summed_over_serve_workers_keeps_tritons_names(tmp_path):
    """Given a pb_utils.MetricFamily counter recorded 2 here and 3 in another worker of
    `serve --workers N` (its file),
    When /metrics is scraped here (the sums),
    Then the family is written as Triton writes it: HELP and TYPE counter under its own
    name and one series of that name (no _total), valued 5."""
    from prometheus_client import CollectorRegistry

    from lambdaserve.metrics.custom import CustomMetrics
    from lambdaserve.metrics.prometheus import exposition
    from lambdaserve.metrics.shared import SummedMetrics, families_of
    from lambdaserve.runtimes.triton_python import pb_utils

    registries = []
    for count in (2, 3):
        store = CustomMetrics()
        family = pb_utils.MetricFamily(
            "latency_ns", "Time spent", pb_utils.MetricFamily.COUNTER, store=store
        )
        family.Metric(labels={"model": "m"}).increment(count)
        registry = CollectorRegistry()
        registry.register(store)
        registries.append(registry)
    (tmp_path / "metrics-4242.json").write_text(json.dumps(families_of(registries[1])))
    summed = CollectorRegistry()
    summed.register(SummedMetrics(registries[0], lambda: tmp_path.glob("*")))

    text = exposition(summed).decode()

    assert "# HELP latency_ns Time spent\n# TYPE latency_ns counter\n" in text
    assert 'latency_ns{model="m"} 5.0\n' in text and "latency_ns_total" not in text
