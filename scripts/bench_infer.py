"""Inference overhead, as ratios to raw ``InferenceSession.run`` measured in the same run.

1. Lambda warm path: the infer function's Mangum handler invoked in-process with an API
   Gateway v2 event (MLP 784->256->10, one row of 784 JSON floats).
2. HTTP via uvicorn, concurrency 1: p50 latency of the same request over a kept-alive
   connection.
3. Codec throughput for a 1x3x224x224 FP32 tensor: JSON vs binary (decode + encode).

    python scripts/bench_infer.py [--requests 2000]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import numpy as np
import onnxruntime as ort
from moto import mock_aws

from lambdaserve.local.demo import demo_mlp_bytes
from lambdaserve.local.emulator import free_port
from lambdaserve.local.http_api_event import http_api_event
from lambdaserve.local.resources import ensure_resources
from lambdaserve.processes.background import BackgroundServer
from lambdaserve.processes.event_pump import LocalContext
from lambdaserve.protocol.v2 import encode_infer_response, parse_infer_request
from lambdaserve.settings import get_settings
from lambdaserve.wiring.aws import AwsClients
from lambdaserve.wiring.manage import build_manage_services


def per_call_us(call: Callable[[], object], count: int) -> list[float]:
    for _ in range(min(200, count)):
        call()
    samples = []
    for _ in range(count):
        start = time.perf_counter_ns()
        call()
        samples.append((time.perf_counter_ns() - start) / 1000)
    return samples


def codec_gbps(body: bytes, header_length: int | None, count: int) -> float:
    request = parse_infer_request(body, header_length)
    output = request.inputs[0].data
    wants_binary = header_length is not None
    request = type(request)(request.inputs, request.outputs, None, wants_binary)

    def round_trip() -> None:
        parsed = parse_infer_request(body, header_length)
        encode_infer_response("m", 1, request, {"y": parsed.inputs[0].data})

    seconds = statistics.median(per_call_us(round_trip, count)) / 1e6
    return 2 * output.nbytes / seconds / 1e9  # decode + encode of one tensor each


def warm_infer_function(
    files: dict[str, bytes], models: Sequence[str], work: str
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The infer function's handler, warm, in this process: ``files`` (bucket keys) published
    to moto's bucket and ``models`` reconciled in that order (steps before their ensembles).

    Call inside ``mock_aws()``: the catalog and bucket are moto's, in this process.
    """
    os.environ.update(
        AWS_ACCESS_KEY_ID="test",
        AWS_SECRET_ACCESS_KEY="test",
        AWS_DEFAULT_REGION="us-east-1",
        LAMBDASERVE_WORK_DIR=work,
        LAMBDASERVE_PYTHON_MODELS="1",
        POWERTOOLS_METRICS_DISABLED="true",
        POWERTOOLS_LOG_LEVEL="WARNING",
    )
    os.environ.pop("AWS_ENDPOINT_URL", None)
    get_settings.cache_clear()
    settings = get_settings()
    clients = AwsClients(settings)
    ensure_resources(clients, settings)
    for key, body in files.items():
        clients.s3.put_object(Bucket=settings.bucket, Key=key, Body=body)
    registrar = build_manage_services(settings, clients).registrar
    for model in models:
        registrar.reconcile_model(model)

    from lambdaserve.handlers import infer
    from lambdaserve.wiring.process import install

    install(None)  # built from these settings on the first request
    context = LocalContext("infer")
    return lambda event: infer.api_handler(event, context)


def lambda_warm_path_us(model: bytes, body: bytes, requests: int, work: str) -> float:
    """p50 of the infer Lambda's warm path, in-process, for an API Gateway v2 infer event."""
    handler = warm_infer_function({"models/mlp/1/model.onnx": model}, ["mlp"], work)
    event = http_api_event("POST", "/v2/models/mlp/infer", body)
    assert handler(event)["statusCode"] == 200
    return statistics.median(per_call_us(lambda: handler(event), requests))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    model = demo_mlp_bytes(inputs=784, hidden=256, outputs=10, seed=0)
    row = np.random.default_rng(0).random((1, 784), dtype=np.float32)
    body = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT__0",
                    "datatype": "FP32",
                    "shape": [1, 784],
                    "data": row.ravel().tolist(),
                }
            ]
        }
    ).encode()

    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    raw = statistics.median(
        per_call_us(lambda: session.run(None, {"INPUT__0": row}), args.requests)
    )

    with TemporaryDirectory() as work, mock_aws():
        lambda_us = lambda_warm_path_us(model, body, args.requests, work)
        from lambdaserve.wiring.process import current

        port = free_port()
        server = BackgroundServer(current().inference_app, "127.0.0.1", port).start()
        connection = http.client.HTTPConnection("127.0.0.1", port)

        def post() -> None:
            connection.request(
                "POST", "/v2/models/mlp/infer", body, {"content-type": "application/json"}
            )
            response = connection.getresponse()
            response.read()
            assert response.status == 200

        http_samples = per_call_us(post, args.requests)
        server.stop()

    image = np.random.default_rng(1).random((1, 3, 224, 224), dtype=np.float32)
    json_body = json.dumps(
        {
            "inputs": [
                {
                    "name": "x",
                    "datatype": "FP32",
                    "shape": list(image.shape),
                    "data": image.ravel().tolist(),
                }
            ]
        }
    ).encode()
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "x",
                    "datatype": "FP32",
                    "shape": list(image.shape),
                    "parameters": {"binary_data_size": image.nbytes},
                }
            ]
        }
    ).encode()
    binary_body = header + image.tobytes()
    json_gbps = codec_gbps(json_body, None, 20)
    binary_gbps = codec_gbps(binary_body, len(header), 200)

    http_p50 = statistics.median(http_samples)
    http_p99 = sorted(http_samples)[int(0.99 * (len(http_samples) - 1))]
    print(f"raw InferenceSession.run (MLP 784->256->10, 1 row): p50 {raw:.1f} us")
    print(
        f"1. Lambda warm path (infer api_handler, in-process): p50 {lambda_us:.1f} us = "
        f"{lambda_us / raw:.1f}x raw; overhead {(lambda_us - raw) / 1000:.3f} ms (goal <= 0.25 ms)"
    )
    print(
        f"2. HTTP via uvicorn, c=1: p50 {http_p50 / 1000:.3f} ms (goal <= 1 ms), p99 "
        f"{http_p99 / 1000:.3f} ms = {http_p50 / raw:.1f}x raw"
    )
    print(
        f"3. 1x3x224x224 FP32 decode+encode: binary {binary_gbps:.2f} GB/s, "
        f"JSON {json_gbps:.3f} GB/s "
        f"(binary {binary_gbps / json_gbps:.0f}x JSON; goal binary >= 1 GB/s)"
    )
    results = Path("bench/results")
    results.mkdir(parents=True, exist_ok=True)
    (results / "infer.json").write_text(
        json.dumps(
            {
                "raw_us": raw,
                "lambda_us": lambda_us,
                "http_p50_us": http_p50,
                "http_p99_us": http_p99,
                "binary_gbps": binary_gbps,
                "json_gbps": json_gbps,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
