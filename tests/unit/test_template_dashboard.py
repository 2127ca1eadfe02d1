"""The stack's CloudWatch dashboard: valid JSON once CloudFormation substitutes it, with the
per-model views docs/operations.md explains (requests, errors, p50/p99, cache, cost), each
on a metric the functions write."""

from __future__ import annotations

import json
import re

from lambdaserve.local.template import load_template
from lambdaserve.metrics import cpu_cost, emf

PER_MODEL = {
    "Requests and errors per model": {"Inferences", "InferenceErrors"},
    "Inference time per model, p50 and p99 (ms)": {"InferenceMs"},
    "Response cache hits and misses per model": {"CacheHits", "CacheMisses"},
    "Cost per model: Lambda compute (GB-seconds)": {"ComputeGbSeconds"},
    "Cost per model: serve tasks' CPU seconds": {"CpuSeconds"},
}


def dashboard() -> dict:
    body, _names = load_template()["Resources"]["Dashboard"]["Properties"]["DashboardBody"][
        "Fn::Sub"
    ]
    # what CloudFormation's Fn::Sub does: every ${Name} replaced (placeholders here)
    return json.loads(re.sub(r"\$\{[^}]+\}", "x", body))


def test_the_dashboard_shows_each_per_model_view_on_a_metric_the_functions_write():
    # Given the dashboard as CloudFormation renders it
    widgets = {w["properties"]["title"]: w["properties"] for w in dashboard()["widgets"]}
    # The metrics the infer function's and serve's EMF lines carry
    written = emf.VERSION_METRICS | {cpu_cost.EMF_METRIC}
    for title, metrics in PER_MODEL.items():
        # Then each per-model view searches the model dimensions for metrics that exist
        assert title in widgets, sorted(widgets)
        expressions = " ".join(str(m) for m in widgets[title]["metrics"])
        for name in metrics:
            assert f'MetricName="{name}"' in expressions
            assert name in written
        assert "{lambdaserve,model,version,service}" in expressions
