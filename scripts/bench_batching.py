"""Batching benchmarks, one run, reported as ratios.

1. The batcher's compute path for a 1,000-request delivery (envelopes -> requests ->
   one batch -> run -> split -> v2 responses) vs ``InferenceSession.run`` on the same
   1,000 rows at once. Goal: <= 1.2x + 20 us per request.
2. HTTP: ``lambdaserve serve`` with the dynamic batcher vs ``--no-batching`` at
   concurrency 1, 8, 32 (req/s, p50, p99), MLP 784->256->10, one JSON row per request.
   Load from wrk when installed (``apt-get install wrk``), else a Python generator.

    python scripts/bench_batching.py [--seconds 5]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import onnxruntime as ort

from lambdaserve.local.demo import demo_mlp_bytes
from lambdaserve.local.emulator import free_port, wait_for_port

JSON_HEADERS = {"Content-Type": "application/json"}
CONFIG = b"max_batch_size: 1024\ndynamic_batching { max_queue_delay_microseconds: 0 }\n"


def batcher_compute(model: bytes, rows: np.ndarray) -> dict[str, float]:
    from moto import mock_aws

    from lambdaserve.local.resources import ensure_resources
    from lambdaserve.queued.inference import run_envelopes
    from lambdaserve.queued.results import PayloadStore, parse_envelope
    from lambdaserve.settings import Settings
    from lambdaserve.wiring.aws import AwsClients
    from lambdaserve.wiring.inference import build_model_server
    from lambdaserve.wiring.manage import build_manage_services

    bodies = [
        json.dumps(
            {
                "id": str(i),
                "model_name": "mlp",
                "inputs": [
                    {
                        "name": "INPUT__0",
                        "datatype": "FP32",
                        "shape": [1, 784],
                        "data": row.tolist(),
                    }
                ],
            }
        )
        for i, row in enumerate(rows)
    ]
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    with tempfile.TemporaryDirectory() as work, mock_aws():
        os.environ.update(
            AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test", AWS_DEFAULT_REGION="us-east-1"
        )
        settings = Settings(work_dir=work)
        clients = AwsClients(settings)
        ensure_resources(clients, settings)
        clients.s3.put_object(Bucket=settings.bucket, Key="models/mlp/config.pbtxt", Body=CONFIG)
        clients.s3.put_object(Bucket=settings.bucket, Key="models/mlp/1/model.onnx", Body=model)
        build_manage_services(settings, clients).registrar.reconcile_model("mlp")
        server = build_model_server(settings, clients)
        payloads = PayloadStore(clients.s3, settings.bucket)

        def ours() -> None:
            envelopes = [parse_envelope(b) for b in bodies]
            outcomes = run_envelopes(server, payloads, envelopes)
            assert all(o.http_status == 200 for o in outcomes)

        def raw() -> None:
            session.run(None, {"INPUT__0": rows})

        decoded = [r for e in (parse_envelope(b) for b in bodies) for r in [_request(e)]]

        def batching_only() -> None:
            results = server.infer_many("mlp", None, decoded)
            assert all(r.error is None for r in results)

        full_s = _best(ours, 5)
        batching_s = _best(batching_only, 10)
        raw_s = _best(raw, 20)
        decode_s = _best(lambda: [parse_envelope(b) for b in bodies], 5)
        stats = server.stats.snapshot("mlp")["model_stats"][0]
    per = 1e6 / len(rows)
    raw_us = raw_s * per
    return {
        "requests": len(rows),
        "raw_us_per_row": round(raw_us, 2),
        "batching_us_per_request": round(batching_s * per, 2),
        "goal_us_per_request": round(1.2 * raw_us + 20, 2),
        "full_path_us_per_request": round(full_s * per, 2),
        "of_which_json_envelope_decode_us": round(decode_s * per, 2),
        "batch_sizes_run": sorted({b["batch_size"] for b in stats["batch_stats"]}),
    }


def _request(envelope):
    from lambdaserve.protocol.v2 import parse_infer_document

    return parse_infer_document(envelope.request_document(), memoryview(b""))


def _best(function, repeats: int) -> float:
    function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def start_stack() -> tuple[subprocess.Popen[bytes], str]:
    """`lambdaserve dev` in a subprocess; returns once its resources and APIs are up."""
    aws_port, management_port = free_port(), free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lambdaserve.cli",
            "dev",
            "--no-demo",
            "--aws-port",
            str(aws_port),
            "--management-port",
            str(management_port),
            "--inference-port",
            str(free_port()),
            "--grpc-port",
            "0",  # the servers under test may take gRPC's default port
            "--metrics-port",
            "0",  # nor TorchServe's metrics port (8082), which another server may hold
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # the APIs start after the template's resources are deployed
    wait_for_port("127.0.0.1", management_port, 90)
    return process, f"http://127.0.0.1:{aws_port}"


def stack_s3(endpoint: str) -> Any:
    """An S3 client of ``start_stack``'s emulator (its test credentials)."""
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )


def serve_environment(endpoint: str, work: str, **extra: str) -> dict[str, str]:
    """The environment of a `lambdaserve serve` process against `start_stack`'s emulator."""
    return {
        **os.environ,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
        "LAMBDASERVE_WORK_DIR": work,
        "POWERTOOLS_METRICS_DISABLED": "true",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
        **extra,
    }


def start_server(endpoint: str, batching: bool, work: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    env = serve_environment(endpoint, work)
    command = [
        sys.executable, "-m", "lambdaserve.cli", "serve", "--port", str(port), "--grpc-port", "0"
    ]  # fmt: skip
    if not batching:
        command.append("--no-batching")
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    wait_for_port("127.0.0.1", port, 60)
    return process, port


def check_answer(port: int, body: bytes, expected: np.ndarray) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port)
    connection.request("POST", "/v2/models/mlp/infer", body, {"content-type": "application/json"})
    response = connection.getresponse()
    answer = json.loads(response.read())
    assert response.status == 200, answer
    np.testing.assert_allclose(answer["outputs"][0]["data"], expected.ravel(), rtol=1e-5)


def load_wrk(
    port: int,
    body: bytes,
    concurrency: int,
    seconds: int,
    *,
    path: str = "/v2/models/mlp/infer",
    headers: dict[str, str] | None = None,
) -> dict[str, float]:
    headers = headers or JSON_HEADERS
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        escaped = "".join(f"\\{byte}" for byte in body)  # any bytes, binary tensors too
        script.write(f'wrk.method = "POST"\nwrk.body = "{escaped}"\n')
        for name, value in headers.items():
            script.write(f'wrk.headers["{name}"] = "{value}"\n')
    output = subprocess.run(
        [
            "wrk",
            "-t",
            str(min(2, concurrency)),
            "-c",
            str(concurrency),
            "-d",
            f"{seconds}s",
            "--latency",
            "-s",
            script.name,
            f"http://127.0.0.1:{port}{path}",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    return {
        "req_s": float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1)),
        "p50_ms": _wrk_ms(re.search(r"50%\s+([\d.]+\w+)", output).group(1)),
        "p99_ms": _wrk_ms(re.search(r"99%\s+([\d.]+\w+)", output).group(1)),
        "errors": int(errors.group(1)) if errors else 0,
    }


def _wrk_ms(text: str) -> float:
    value, unit = re.match(r"([\d.]+)(\w+)", text).groups()
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def load_python(
    port: int,
    body: bytes,
    concurrency: int,
    seconds: int,
    *,
    path: str = "/v2/models/mlp/infer",
    headers: dict[str, str] | None = None,
) -> dict[str, float]:
    headers = headers or JSON_HEADERS
    latencies: list[float] = []
    errors = [0]
    stop = time.monotonic() + seconds
    lock = threading.Lock()

    def client() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port)
        mine = []
        while time.monotonic() < stop:
            start = time.perf_counter()
            connection.request("POST", path, body, headers)
            response = connection.getresponse()
            response.read()
            mine.append(time.perf_counter() - start)
            if response.status != 200:
                errors[0] += 1
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ordered = sorted(latencies)
    return {
        "req_s": len(ordered) / seconds,
        "p50_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[int(0.99 * (len(ordered) - 1))] * 1000,
        "errors": errors[0],
    }


def http_comparison(model: bytes, seconds: int) -> list[dict[str, object]]:
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
    expected = ort.InferenceSession(model).run(None, {"INPUT__0": row})[0]
    load = load_wrk if shutil.which("wrk") else load_python
    stack, endpoint = start_stack()
    rows = []
    try:
        s3 = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
        )
        s3.put_object(
            Bucket="lambdaserve-models",
            Key="models/mlp/config.pbtxt",
            Body=b"max_batch_size: 32\ndynamic_batching { max_queue_delay_microseconds: 0 }\n",
        )
        s3.put_object(Bucket="lambdaserve-models", Key="models/mlp/1/model.onnx", Body=model)
        time.sleep(2)  # the event pump registers it
        with tempfile.TemporaryDirectory() as work:
            servers = {b: start_server(endpoint, b, work) for b in (True, False)}
            try:
                for _, port in servers.values():
                    check_answer(port, body, expected)
                    load(port, body, 4, 1)  # warm-up
                for concurrency in (1, 8, 32):
                    point = {"concurrency": concurrency}
                    for batching, (_, port) in servers.items():
                        name = "batching" if batching else "no_batching"
                        point[name] = load(port, body, concurrency, seconds)
                        check_answer(port, body, expected)
                    rows.append(point)
            finally:
                for process, _ in servers.values():
                    process.send_signal(signal.SIGINT)
                    process.wait(30)
    finally:
        stack.send_signal(signal.SIGINT)
        stack.wait(30)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=5)
    args = parser.parse_args()
    model = demo_mlp_bytes(inputs=784, hidden=256, outputs=10, seed=0)
    rows = np.random.default_rng(1).random((1000, 784), dtype=np.float32)
    compute = batcher_compute(model, rows)
    print("1. batcher compute path, 1,000 requests:", json.dumps(compute))
    print(
        f"   batching machinery {compute['batching_us_per_request']} us/request vs raw "
        f"{compute['raw_us_per_row']} us/row (goal <= {compute['goal_us_per_request']}); "
        f"with JSON envelopes decoded and responses encoded: "
        f"{compute['full_path_us_per_request']} us/request"
    )
    table = http_comparison(model, args.seconds)
    print(
        "2. HTTP, lambdaserve serve: dynamic batcher vs none "
        f"({'wrk' if shutil.which('wrk') else 'python load'}, {args.seconds}s per point)"
    )
    print(
        f"{'c':>3} {'batching req/s':>15} {'p50':>7} {'p99':>7} {'none req/s':>11} {'p50':>7} "
        f"{'p99':>7} {'ratio':>6}"
    )
    for point in table:
        b, n = point["batching"], point["no_batching"]
        print(
            f"{point['concurrency']:>3} {b['req_s']:>15.0f} {b['p50_ms']:>7.2f} "
            f"{b['p99_ms']:>7.2f} "
            f"{n['req_s']:>11.0f} {n['p50_ms']:>7.2f} {n['p99_ms']:>7.2f} "
            f"{b['req_s'] / n['req_s']:>6.2f}"
        )
    results = Path("bench/results")
    results.mkdir(parents=True, exist_ok=True)
    (results / "batching.json").write_text(
        json.dumps({"compute": compute, "http": table}, indent=2)
    )


if __name__ == "__main__":
    main()
