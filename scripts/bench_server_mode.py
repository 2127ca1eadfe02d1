"""Server mode's forwarded path, side by side with calling `serve` directly: the infer
function's handler (API Gateway v2 events, in this process) forwarding a KIND_GPU model's
request to a local `lambdaserve serve`, against the same request sent straight to `serve`.
One run, concurrency 1, this machine: the added p50 is what forwarding costs (goal: 2 ms).

    python scripts/bench_server_mode.py [--requests 2000]

Writes bench/results/server-mode-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import tempfile
import time
from pathlib import Path

import boto3
import httpx
import numpy as np
from bench_batching import start_server, start_stack

from lambdaserve.local.demo import demo_mlp_bytes
from lambdaserve.local.http_api_event import http_api_event

RESULTS = Path(__file__).resolve().parent.parent / "bench" / "results"
CONFIG = b"max_batch_size: 8\ninstance_group [{ kind: KIND_GPU }]\n"


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[int(len(ordered) * 0.99) - 1] * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    stack, endpoint = start_stack()
    try:
        os.environ.update(
            AWS_ENDPOINT_URL=endpoint,
            AWS_ACCESS_KEY_ID="test",
            AWS_SECRET_ACCESS_KEY="test",
            AWS_DEFAULT_REGION="us-east-1",
            POWERTOOLS_METRICS_DISABLED="true",
            POWERTOOLS_LOG_LEVEL="WARNING",
        )
        s3 = boto3.client("s3")
        s3.put_object(Bucket="lambdaserve-models", Key="models/gpu/config.pbtxt", Body=CONFIG)
        model = demo_mlp_bytes(inputs=784, hidden=256, outputs=10, seed=0)
        s3.put_object(Bucket="lambdaserve-models", Key="models/gpu/1/model.onnx", Body=model)
        time.sleep(3)  # the event pump validates the version
        with tempfile.TemporaryDirectory() as work:
            process, port = start_server(endpoint, True, work)
            try:
                results = measure(f"http://127.0.0.1:{port}", args.requests, Path(work))
            finally:
                process.send_signal(signal.SIGTERM)
                process.wait(30)
    finally:
        stack.send_signal(signal.SIGINT)
        stack.wait(30)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"server-mode-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))
    print(f"wrote {out}")


def measure(serve_url: str, requests: int, work: Path) -> dict[str, object]:
    os.environ.update(LAMBDASERVE_SERVER_URL=serve_url, LAMBDASERVE_WORK_DIR=str(work / "fn"))
    from lambdaserve.handlers import infer
    from lambdaserve.processes.event_pump import LocalContext

    row = np.random.default_rng(0).random((1, 784), dtype=np.float32)
    body = json.dumps(
        {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 784],
                     "data": row.ravel().tolist()}]}
    ).encode()  # fmt: skip
    path = "/v2/models/gpu/infer"
    context = LocalContext("infer")
    direct_times, forwarded_times = [], []
    with httpx.Client(base_url=serve_url, timeout=30) as client:
        for _ in range(50):  # warm both paths: the model loads in `serve`, the function's client
            assert client.post(path, content=body).status_code == 200
            answer = infer.api_handler(http_api_event("POST", path, body), context)
            assert answer["statusCode"] == 200, answer["body"]
        for _ in range(requests):  # alternate, so drift on a shared machine hits both
            started = time.perf_counter()
            client.post(path, content=body)
            direct_times.append(time.perf_counter() - started)
            started = time.perf_counter()
            infer.api_handler(http_api_event("POST", path, body), context)
            forwarded_times.append(time.perf_counter() - started)
        # every request, direct or forwarded, was answered by `serve`
        stats = client.get("/v2/models/gpu/stats").json()["model_stats"][0]
        assert int(stats["inference_count"]) == 2 * (requests + 50), stats["inference_count"]
    direct, forwarded = percentiles(direct_times), percentiles(forwarded_times)
    return {
        "requests": requests,
        "direct_to_serve": direct,
        "forwarded_by_the_infer_function": forwarded,
        "added_p50_ms": forwarded["p50_ms"] - direct["p50_ms"],
        "ratio_p50": forwarded["p50_ms"] / direct["p50_ms"],
    }


if __name__ == "__main__":
    main()
