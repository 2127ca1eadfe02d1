"""Triton's tracing: the latency a request gains when it is traced, one run.

``lambdaserve serve`` three times against one ``lambdaserve dev`` stack, the same small ONNX
model (the demo MLP 784 -> 256 -> 10, one JSON row per request): one server with tracing OFF
(Triton's default), one tracing every request in Triton mode (``--trace-config rate=1``,
``level=TIMESTAMPS``, a trace file written every 1,000 traces), one tracing every request in
OpenTelemetry mode (the OpenTelemetry SDK's spans over OTLP/HTTP to a receiver in this
process). Sequential requests from one client, alternating between the servers in rounds of
100 (the order turned each round) so drift hits all; p50 and the mean per server, and the
differences. Beside it, in this process, the tracing work alone per request (start,
QUEUE_START, the compute stamps, REQUEST_END and the record written or the spans handed to
the SDK), best of 5.

    python scripts/bench_trace.py [--requests 3000]
"""

from __future__ import annotations

import argparse
import http.client
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import boto3
import numpy as np
from bench_batching import serve_environment, start_stack

from lambdaserve.local.demo import demo_mlp_bytes
from lambdaserve.local.emulator import free_port, wait_for_port

HEADERS = {"Content-Type": "application/json"}


class Receiver(BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint that takes the spans and answers 200 (what a collector does
    first), counting the exports."""

    exports = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        Receiver.exports += 1
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def otlp_receiver() -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}/v1/traces"


def start_serve(endpoint: str, work: str, *flags: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    command = [sys.executable, "-m", "lambdaserve.cli", "serve", "--port", str(port)]
    process = subprocess.Popen(
        [*command, "--grpc-port", "0", *flags],
        env=serve_environment(endpoint, work),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for_port("127.0.0.1", port, 60)
    return process, port


def timed(connection: http.client.HTTPConnection, body: bytes) -> float:
    start = time.perf_counter()
    connection.request("POST", "/v2/models/mlp/infer", body, HEADERS)
    response = connection.getresponse()
    response.read()
    elapsed = time.perf_counter() - start
    assert response.status == 200, response.status
    return elapsed


def hook_cost_ns(directory: str, url: str, count: int = 20000) -> dict[str, float]:
    """ns per request of what the data plane and the serving code do for a trace, OFF and
    at rate 1 (TIMESTAMPS; Triton mode: records written every 1,000 traces; OpenTelemetry
    mode: the spans to the SDK's batch processor, exported to ``url``)."""
    from lambdaserve.protocol.v2 import InferInput, InferRequest
    from lambdaserve.tracing.config import trace_config
    from lambdaserve.tracing.request_trace import computed
    from lambdaserve.tracing.tracer import Tracer

    data = np.zeros((1, 784), np.float32)
    outputs = [{"OUTPUT__0": np.zeros((1, 10), np.float32)}]
    file = f"{directory}/hooks.json"
    tracers = {
        "off": Tracer(trace_config([])),
        "rate_1": Tracer(
            trace_config([f"triton,file={file}", "level=TIMESTAMPS", "rate=1",
                          "triton,log-frequency=1000"])
        ),
        "otel_rate_1": Tracer(
            trace_config(["mode=opentelemetry", f"opentelemetry,url={url}", "level=TIMESTAMPS",
                          "rate=1"])
        ),
    }  # fmt: skip
    best: dict[str, float] = {}
    for name, tracer in tracers.items():
        runs = []
        for _ in range(5):
            requests = [
                InferRequest((InferInput("INPUT__0", "FP32", (1, 784), data),))
                for _ in range(count)
            ]
            start = time.perf_counter_ns()
            for request in requests:
                trace = tracer.start("mlp", request)
                if trace is not None:
                    tracer.queued(trace, request)
                computed([request], (1, 2, 3, 4), outputs)
                if trace is not None:
                    tracer.finish(trace, request, 1)
            runs.append((time.perf_counter_ns() - start) / count)
        best[name] = round(min(runs))
        tracer.close()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=3000)
    args = parser.parse_args()
    row = np.random.default_rng(0).random((1, 784), dtype=np.float32)
    tensor = {"name": "INPUT__0", "datatype": "FP32", "shape": [1, 784]}
    body = json.dumps({"inputs": [{**tensor, "data": row.ravel().tolist()}]}).encode()
    stack, endpoint = start_stack()
    receiver, url = otlp_receiver()
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
            Key="models/mlp/1/model.onnx",
            Body=demo_mlp_bytes(784, 256, 10),
        )
        time.sleep(2)  # the event pump registers it
        with tempfile.TemporaryDirectory() as work:
            trace = Path(work) / "trace.json"
            flags = {
                "off": (),
                "rate_1": (
                    "--trace-config", f"triton,file={trace}", "--trace-config", "level=TIMESTAMPS",
                    "--trace-config", "rate=1", "--trace-config", "triton,log-frequency=1000",
                ),
                "otel_rate_1": (
                    "--trace-config", "mode=opentelemetry", "--trace-config",
                    f"opentelemetry,url={url}", "--trace-config", "level=TIMESTAMPS",
                    "--trace-config", "rate=1",
                ),
            }  # fmt: skip
            servers = {name: start_serve(endpoint, work, *f) for name, f in flags.items()}
            try:
                connections = {
                    name: http.client.HTTPConnection("127.0.0.1", port)
                    for name, (_, port) in servers.items()
                }
                for connection in connections.values():  # warm-up: load, first runs
                    for _ in range(200):
                        timed(connection, body)
                times: dict[str, list[float]] = {name: [] for name in servers}
                order = list(connections.items())
                for round_ in range(args.requests // 100):
                    turned = order[round_ % len(order) :] + order[: round_ % len(order)]
                    for name, connection in turned:
                        times[name] += [timed(connection, body) for _ in range(100)]
            finally:
                for process, _ in servers.values():
                    process.send_signal(signal.SIGINT)
                    process.wait(30)
            written = sum(len(json.loads(p.read_text())) for p in Path(work).glob("trace.json.*"))
    finally:
        stack.send_signal(signal.SIGINT)
        stack.wait(30)
    report = {
        name: {
            "p50_us": round(statistics.median(values) * 1e6, 1),
            "mean_us": round(statistics.fmean(values) * 1e6, 1),
        }
        for name, values in times.items()
    }
    off = report["off"]
    for mode in ("rate_1", "otel_rate_1"):
        added = {k: round(report[mode][k] - off[k], 1) for k in ("p50_us", "mean_us")}
        report[f"{mode}_added"] = added
    report["trace_records_written"] = written  # type: ignore[assignment]
    report["otlp_exports_received"] = Receiver.exports  # type: ignore[assignment]
    with tempfile.TemporaryDirectory() as directory:
        report["hook_ns_per_request"] = hook_cost_ns(directory, url)  # type: ignore[assignment]
    receiver.shutdown()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
