"""The infer function's per-invocation metrics, as CloudWatch reads Embedded Metric Format."""

from __future__ import annotations

import io
import json

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
