"""TorchServe's metrics API families, written as TorchServe's Java client writes them."""

from __future__ import annotations

import asyncio
import re
from typing import Any
from urllib.parse import urlencode

import pytest
from prometheus_client.parser import text_string_to_metric_families

from lambdaserve.errors import InvalidInput
from lambdaserve.metrics.stats import Execution, StatsRegistry
from lambdaserve.metrics.torchserve import render, torchserve_registry
from lambdaserve.processes.asgi.metrics_api import ResponseCounts, metrics_api_app

# The check TorchServe's own Postman collection makes of its metrics API
POSTMAN = re.compile(r'.*Requests2XX\{Level="Host",Hostname=".*",\} \d+\.\d+.*')


@pytest.fixture
def stats() -> StatsRegistry:
    registry = StatsRegistry()
    ms = 1_000_000
    registry.record_success("mlp", 1, Execution(2, 2, 3 * ms, ms, 4 * ms, ms))
    registry.record_failure("mlp", 1, 2 * ms, InvalidInput("wrong shape"))
    return registry


def test_the_families_read_as_torchserves_text(stats):
    # Given two requests served, one refused, and responses answered by the APIs
    responses = {"2XX": 8, "4XX": 1}
    registry = torchserve_registry(lambda: stats, lambda: responses)
    # When the metrics are rendered
    text = render(registry)
    # Then the host counters read exactly as TorchServe writes them (trailing comma, no _total)
    assert POSTMAN.search(text)
    assert re.search(r'^Requests4XX\{Level="Host",Hostname="[^"]+",\} 1\.0$', text, re.M)
    assert "Requests5XX{" not in text and "# TYPE Requests5XX counter" in text
    # and the per-model families carry TorchServe's labels and the registry's numbers
    series = {
        # the parser names counter samples <name>_total; TorchServe's names are the families'
        (family.name, sample.labels.get("model_name")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    assert series[("ts_inference_requests", "mlp")] == 3  # two succeeded, one failed
    assert series[("ts_inference_latency_microseconds", "mlp")] == 9000 + 2000
    assert series[("ts_queue_latency_microseconds", "mlp")] == 3000
    assert 'model_version="1"' in text
    # and the host gauges are there, as percentages and sizes
    assert 0 <= series[("MemoryUtilization", None)] <= 100
    assert series[("DiskAvailable", None)] > 0


def test_the_metrics_api_filters_by_name_and_counts_the_apis_it_watches(stats):
    # Given an app whose responses are counted, and the metrics API beside it
    responses = ResponseCounts()

    async def teapot(scope, receive, send):
        status = 200 if scope["path"] == "/ok" else 404
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    # When it answers twice, once 404
    for path in ("/ok", "/ok", "/missing"):
        call(responses.watch(teapot), path)
    metrics = metrics_api_app(lambda: stats, responses)
    # Then the metrics API reports them, and ?name[]= picks families as TorchServe's does
    status, headers, text = call(metrics, "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    assert re.search(r'^Requests2XX\{Level="Host",Hostname=".+",\} 2\.0$', text, re.M)
    assert re.search(r"^Requests4XX\{.*\} 1\.0$", text, re.M)
    names = [("name[]", "ts_queue_latency_microseconds"), ("name[]", "Requests2XX")]
    _, _, picked = call(metrics, "/metrics", urlencode(names))
    assert {f.name for f in text_string_to_metric_families(picked)} == {
        "ts_queue_latency_microseconds",
        "Requests2XX",
    }


def call(app: Any, path: str, query: str = "") -> tuple[int, dict[str, str], str]:
    """One GET through an ASGI app, in-process."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "headers": [],
        "http_version": "1.1",
        "scheme": "http",
        "server": ("testserver", 80),
        "client": ("127.0.0.1", 1),
        "root_path": "",
    }
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(app(scope, receive, send))
    finally:
        loop.close()
    start = next(m for m in sent if m["type"] == "http.response.start")
    headers = {k.decode(): v.decode() for k, v in start.get("headers", [])}
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], headers, body.decode()
