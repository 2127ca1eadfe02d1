"""Cost per model in `lambdaserve serve`: the process's CPU seconds split among the models
it ran, on /metrics and as the EMF lines an ECS task's logs carry to CloudWatch."""

from __future__ import annotations

import json
import re

import httpx

from tests import builders
from tests.integration.grpc_support import lambdaserve_serve
from tests.support import wait_until

ROWS = {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 64], "data": [1] * 64}]}


def test_serve_splits_its_cpu_seconds_among_the_models_it_ran(stack, monkeypatch):
    # Given two models, and serve writing its cost lines every second
    for name in ("small", "large"):
        stack.put(f"models/{name}/1/model.onnx", builders.onnx_mlp(64, 3))
        stack.wait_state(name, 1, "READY")
    monkeypatch.setenv("LAMBDASERVE_COST_INTERVAL_S", "1")
    with lambdaserve_serve() as served:
        url = f"http://127.0.0.1:{served.http}"
        # When one model gets more requests than the other
        with httpx.Client(base_url=url, timeout=30) as client:
            for name, count in (("small", 20), ("large", 200)):
                for _ in range(count):
                    assert client.post(f"/v2/models/{name}/infer", json=ROWS).status_code == 200
            metrics = client.get("/metrics").text
        lines = wait_until(lambda: _cost_lines(served.output()), 10)
    # Then /metrics attributes CPU seconds to both, the busier the more
    pattern = r'lambdaserve_model_cpu_seconds_total\{model="(\w+)",version="1"\} (\S+)'
    seconds = dict(re.findall(pattern, metrics))
    assert float(seconds["large"]) > float(seconds["small"]) > 0, metrics
    # and the log carries CpuSeconds per model as EMF lines
    assert {line["model"] for line in lines} >= {"large"}
    assert all(line["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "lambdaserve" for line in lines)


def _cost_lines(output: str) -> list[dict]:
    found = []
    for text in output.splitlines():
        if '"CpuSeconds"' in text:
            found.append(json.loads(text[text.index("{") :]))
    return found
