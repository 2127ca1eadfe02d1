"""Payload capture: the latency a request gains when its model captures at 100%, one run.

One ``lambdaserve serve`` against one ``lambdaserve dev`` stack, two copies of one small ONNX
model (the demo MLP 784 -> 256 -> 10, one JSON row per request): ``plain`` captures nothing,
``captured`` captures every request and answer (``data_capture`` with
``sampling_percentage`` 100). Sequential requests from one client, alternating between the
models in rounds of 100 (each first in every other round) so drift hits both; p50 and mean
per model, the difference, and the records S3 holds at the end. Beside it, in this
process, the door's capture work alone per request (the setting looked up, sampled, the
exchange queued), best of 5.

    python scripts/bench_capture.py [--requests 3000]
"""

from __future__ import annotations

import argparse
import http.client
import json
import signal
import statistics
import tempfile
import time
from types import SimpleNamespace

import numpy as np
from bench_batching import stack_s3, start_stack
from bench_trace import start_serve

from lambdaserve.local.demo import demo_mlp_bytes

HEADERS = {"Content-Type": "application/json"}
SETTING = '{\\"sampling_percentage\\": 100}'
CONFIG = f'parameters {{ key: "data_capture" value {{ string_value: "{SETTING}" }} }}'


def timed(connection: http.client.HTTPConnection, model: str, body: bytes) -> float:
    start = time.perf_counter()
    connection.request("POST", f"/v2/models/{model}/infer", body, HEADERS)
    response = connection.getresponse()
    response.read()
    elapsed = time.perf_counter() - start
    assert response.status == 200, response.status
    return elapsed


def offer_cost_ns(body: bytes, count: int = 20000) -> float:
    """ns per request of the door's capture work: the cached setting, the sample, the queue
    (the writer thread's S3 put is not on the request's path, so not counted here)."""
    from lambdaserve.serving.capture.capture_offers import JSON, offer_served
    from lambdaserve.serving.capture.data_capture import DataCapture

    served = SimpleNamespace(
        model="m",
        version=1,
        config=SimpleNamespace(parameters=(("data_capture", '{"sampling_percentage": 100}'),)),
    )
    runs = []
    for _ in range(5):
        capture = DataCapture(lambda *_: None, "captures", max_pending=count + 1)
        start = time.perf_counter_ns()
        for _ in range(count):
            offer_served(capture, served, (body, JSON), (body, JSON))  # type: ignore[arg-type]
        runs.append((time.perf_counter_ns() - start) / count)
    return round(min(runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=3000)
    args = parser.parse_args()
    row = np.random.default_rng(0).random((1, 784), dtype=np.float32)
    tensor = {"name": "INPUT__0", "datatype": "FP32", "shape": [1, 784]}
    body = json.dumps({"inputs": [{**tensor, "data": row.ravel().tolist()}]}).encode()
    stack, endpoint = start_stack()
    try:
        s3 = stack_s3(endpoint)
        model = demo_mlp_bytes(784, 256, 10)
        bucket = "lambdaserve-models"
        s3.put_object(Bucket=bucket, Key="models/captured/config.pbtxt", Body=CONFIG)
        for name in ("plain", "captured"):
            s3.put_object(Bucket=bucket, Key=f"models/{name}/1/model.onnx", Body=model)
        time.sleep(3)  # the event pump registers them
        with tempfile.TemporaryDirectory() as work:
            process, port = start_serve(endpoint, work)
            try:
                connection = http.client.HTTPConnection("127.0.0.1", port)
                models = ["plain", "captured"]
                for name in models:  # warm-up: load, first runs
                    for _ in range(200):
                        timed(connection, name, body)
                times: dict[str, list[float]] = {name: [] for name in models}
                for round_ in range(args.requests // 100):
                    for name in models[:: 1 if round_ % 2 else -1]:
                        times[name] += [timed(connection, name, body) for _ in range(100)]
                time.sleep(6)  # the writer's next flush
            finally:
                process.send_signal(signal.SIGINT)
                process.wait(30)
        listed = s3.list_objects_v2(Bucket=bucket, Prefix="captures/captured/")
        records = sum(
            len(s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read().splitlines())
            for o in listed.get("Contents", [])
        )
    finally:
        stack.send_signal(signal.SIGINT)
        stack.wait(30)
    report: dict[str, object] = {
        name: {
            "p50_us": round(statistics.median(values) * 1e6, 1),
            "mean_us": round(statistics.fmean(values) * 1e6, 1),
        }
        for name, values in times.items()
    }
    p50 = {name: statistics.median(values) for name, values in times.items()}
    mean = {name: statistics.fmean(values) for name, values in times.items()}
    report["added_p50_us"] = round((p50["captured"] - p50["plain"]) * 1e6, 1)
    report["added_mean_us"] = round((mean["captured"] - mean["plain"]) * 1e6, 1)
    report["records_in_s3"] = records
    report["requests_captured_model"] = len(times["captured"]) + 200
    report["door_capture_ns_per_request"] = offer_cost_ns(body)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
