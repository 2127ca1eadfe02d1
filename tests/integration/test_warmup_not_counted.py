"""Warm-up is no client's request: TorchServe's ``ts_*`` request counters (and Triton's
statistics, which they are read from) count what clients sent, not the runs a version's
load makes to warm it up, nor the step calls those runs make."""

from __future__ import annotations

import re

from lambdaserve.metrics.torchserve import render, torchserve_registry
from lambdaserve.processes.asgi.metrics_api import ResponseCounts
from tests.integration.test_ensembles import MLP, STEPS, publish


def test_ts_request_counters_count_clients_requests_only(stack):
    """Given an ensemble (pipe) of ONNX and Python steps: its load warms it up with zeros,
    which runs every step
    When a client sends it two requests
    Then ts_inference_requests_total is 2 for the ensemble and for each step: warm-up is no
    client's request."""
    stack.put("models/mlp/1/model.onnx", MLP)
    for name in (*STEPS, "pipe"):
        publish(stack, name)
    for model in ("mlp", *STEPS, "pipe"):
        stack.wait_state(model, 1, "READY")
    body = {"inputs": [{"name": "RAW", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}
    for _ in range(2):
        answer = stack.inference.post("/v2/models/pipe/infer", json=body)
        assert answer.status_code == 200, answer.text

    # what TorchServe's metrics port (8082 in dev) renders, from this process's stats
    text = render(torchserve_registry(lambda: stack.process.server().stats, ResponseCounts()))
    counted = {
        found.group(1): float(found.group(2))
        for found in re.finditer(
            r'^ts_inference_requests_total\{model_name="([^"]+)",.*\} (\S+)$', text, re.M
        )
    }
    assert counted == {model: 2.0 for model in ("pipe", "mlp", *STEPS)}, text
