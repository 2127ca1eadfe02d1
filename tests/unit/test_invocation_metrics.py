"""The infer function's per-invocation metrics, as CloudWatch reads Embedded Metric Format."""

from __future__ import annotations

import io
import json

import pytest

from lambdaserve.metrics.emf import InvocationMetrics
from lambdaserve.metrics.stats import Execution


def test_one_emf_line_per_model_version_with_its_counts():
    # Given an invocation that ran a pipeline step twice and failed one call of another model
    out = io.StringIO()
    metrics = InvocationMetrics("lambdaserve-infer", out)
    metrics.record("pre", 1, Execution(1, 1, 0, 1000, 2_000_000, 0), 0)
    metrics.record("pre", 1, Execution(2, 2, 0, 0, 1_000_000, 0), 0)
    metrics.record("mlp", 3, None, 500)
    # When the invocation ends
    metrics.flush()
    metrics.flush()  # nothing new: nothing written
    # Then each line is an EMF document naming its dimensions and metrics
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(d["model"], d["version"]) for d in lines] == [("pre", "1"), ("mlp", "3")]
    pre, mlp = lines
    directive = pre["_aws"]["CloudWatchMetrics"][0]
    assert directive["Namespace"] == "lambdaserve"
    assert directive["Dimensions"] == [["model", "version", "service"], ["service"]]
    for name in [m["Name"] for m in directive["Metrics"]]:
        assert name in pre
    assert (pre["Inferences"], pre["InferenceErrors"], pre["InferenceMs"]) == (3, 0, 3.001)
    assert (mlp["Inferences"], mlp["InferenceErrors"]) == (0, 1)
    assert pre["service"] == "lambdaserve-infer" and isinstance(pre["_aws"]["Timestamp"], int)


def test_custom_metrics_model_code_records_reach_cloudwatch_as_emf():
    from lambdaserve.metrics.custom import CustomMetrics
    from lambdaserve.runtimes.triton_python import pb_utils

    # Given the infer function listening to the custom metrics of model code
    out = io.StringIO()
    metrics = InvocationMetrics("lambdaserve-infer", out)
    store = CustomMetrics()
    store.add_listener(metrics.record_custom)
    # When a Python model records with pb_utils' families during one invocation
    requests = pb_utils.MetricFamily("requests_total", "requests", "counter", store=store)
    latency = pb_utils.MetricFamily("pre_ms", "latency", "histogram", store=store)
    depth = pb_utils.MetricFamily("queue_depth", "depth", "gauge", store=store)
    requests.Metric(labels={"model": "pre"}).increment(2)
    requests.Metric(labels={"model": "pre"}).increment(3)
    latency.Metric(labels={"model": "pre"}).observe(1.5)
    latency.Metric(labels={"model": "pre"}).observe(2.5)
    depth.Metric(labels={"model": "pre"}).set(7)
    depth.Metric(labels={"model": "pre"}).set(4)
    metrics.flush()
    # Then each series is one EMF line with its labels as dimensions
    lines = {
        next(m["Name"] for m in d["_aws"]["CloudWatchMetrics"][0]["Metrics"]): d
        for d in map(json.loads, out.getvalue().splitlines())
    }
    assert lines["requests_total"]["requests_total"] == 5
    assert lines["pre_ms"]["pre_ms"] == [1.5, 2.5]
    assert lines["queue_depth"]["queue_depth"] == 4
    directive = lines["requests_total"]["_aws"]["CloudWatchMetrics"][0]
    assert directive["Dimensions"] == [["model", "service"]]
    assert lines["requests_total"]["model"] == "pre"
    # and the next invocation starts from nothing
    metrics.flush()
    assert len(out.getvalue().splitlines()) == 3


def test_an_invocations_billed_compute_is_split_among_the_models_it_ran():
    # Given a 2048 MB function's invocation that ran two versions, one three times as long
    out = io.StringIO()
    metrics = InvocationMetrics("lambdaserve-infer", out, memory_mb=2048)
    metrics.begin()
    metrics.record("pre", 1, Execution(1, 1, 0, 0, 1_000_000, 0), 0)
    metrics.record("mlp", 3, Execution(1, 1, 0, 0, 3_000_000, 0), 0)
    # When the invocation ends
    metrics.flush()
    # Then each line carries its version's share of the GB-seconds, as an EMF metric
    pre, mlp = (json.loads(line) for line in out.getvalue().splitlines())
    for line in (pre, mlp):
        names = [m["Name"] for m in line["_aws"]["CloudWatchMetrics"][0]["Metrics"]]
        assert "ComputeGbSeconds" in names
    assert mlp["ComputeGbSeconds"] == pytest.approx(3 * pre["ComputeGbSeconds"], rel=1e-3)
    assert pre["ComputeGbSeconds"] > 0


def test_outside_lambda_no_cost_is_claimed():
    out = io.StringIO()
    metrics = InvocationMetrics("lambdaserve-worker", out)
    metrics.begin()
    metrics.record("mlp", 1, Execution(1, 1, 0, 0, 1_000_000, 0), 0)
    metrics.flush()
    assert "ComputeGbSeconds" not in json.loads(out.getvalue())
