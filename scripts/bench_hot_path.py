"""The hot doors of `lambdaserve serve`, two source trees side by side, in one run.

Each door — v2 JSON, v2 binary tensors, TorchServe ``/predictions``, TF Serving ``:predict``,
gRPC ModelInfer — at concurrency 1 and 32 against the MLP 784->256->10 of
``bench_peers.py`` (max batch 8, delay 0), with the server's CPU per 1,000 requests (its
process tree, from /proc). With ``--trees new=.,base=/path/to/old/checkout`` the trees'
servers take turns point by point (A B in even rounds, B A in odd ones), so a before/after
ratio is read from one run on one machine; each serve runs that tree's ``layers/core``
(PYTHONPATH) in this venv. ``--py-spy PATH`` also records a raw py-spy profile of every point
(the sampler costs CPU: read those points' figures as profiles only). Doors beyond the
default five: ``grpc-stream`` (the gRPC requests on ModelStreamInfer streams) and
``grpc-live`` (ServerLive calls: what gRPC costs this server with no work); ``--workers N``
runs each ``serve`` with N workers.

    python scripts/bench_hot_path.py --trees new=.,base=/tmp/base [--seconds 5] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import boto3
import numpy as np
import onnxruntime as ort
from bench_batching import (
    JSON_HEADERS,
    load_python,
    load_wrk,
    serve_environment,
    start_stack,
)
from bench_grpc import _load as grpc_load
from bench_grpc import _load_stream as grpc_stream_load
from bench_grpc import request_bytes
from bench_peers import v2_binary_call, v2_body
from cpu_cost import CpuMeter

from lambdaserve.local.demo import demo_mlp_bytes
from lambdaserve.local.emulator import free_port, wait_for_port

RESULTS = Path("bench/results")
LIVE = "/inference.GRPCInferenceService/ServerLive"
CONFIG = b"max_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 0 }\n"


@dataclass(frozen=True)
class Door:
    path: str
    body: bytes
    headers: dict[str, str]


def doors(row: np.ndarray) -> dict[str, Door]:
    values = row.ravel().tolist()
    binary = v2_binary_call(row)  # bench_peers' bodies: the same requests as the peer table
    return {
        "v2-json": Door("/v2/models/mlp/infer", v2_body(row), JSON_HEADERS),
        "v2-binary": Door("/v2/models/mlp/infer", binary.body, binary.headers),
        "predictions": Door("/predictions/mlp", json.dumps([values]).encode(), JSON_HEADERS),
        "tfserving": Door(
            "/v1/models/mlp:predict", json.dumps({"instances": [values]}).encode(), JSON_HEADERS
        ),
    }


class Serve:
    """`lambdaserve serve` from one source tree, against the stack's emulator."""

    def __init__(self, tree: Path, endpoint: str, work: str, workers: int = 1) -> None:
        self.port, self.grpc_port = free_port(), free_port()
        env = serve_environment(endpoint, work, PYTHONPATH=str(tree.resolve() / "layers/core"))
        command = [sys.executable, "-m", "lambdaserve.cli", "serve", "--port", str(self.port)]
        command += ["--grpc-port", str(self.grpc_port), "--workers", str(workers)]
        self.workers = workers
        self.process = subprocess.Popen(
            command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_for_port("127.0.0.1", self.port, 90)
        wait_for_port("127.0.0.1", self.grpc_port, 30)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)


def check(serve: Serve, name: str, door: Door, expected: np.ndarray) -> None:
    """One request through the door; its answer equals onnxruntime's."""
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", serve.port, timeout=30)
    connection.request("POST", door.path, door.body, door.headers)
    response = connection.getresponse()
    raw = response.read()
    assert response.status == 200, (name, response.status, raw[:300])
    answer = json.loads(raw)
    values = (
        answer["outputs"][0]["data"]
        if name.startswith("v2")
        else answer["predictions"]
        if name == "tfserving"
        else answer
    )
    np.testing.assert_allclose(np.ravel(values), expected.ravel(), rtol=1e-4, atol=1e-6)


def measure(
    serve: Serve,
    door: tuple[str, Door | None],
    concurrency: int,
    *,
    seconds: int,
    spy: str | None = None,
) -> dict[str, float]:
    name, door_or_grpc = door
    recorder = None
    if spy:
        out = RESULTS / f"profile-{name}-c{concurrency}-{serve.process.pid}.raw"
        recorder = subprocess.Popen(
            [
                spy,
                "record",
                "-p",
                str(serve.process.pid),
                "-d",
                str(seconds),
                "-r",
                "500",
                "-f",
                "raw",
                "-o",
                str(out),
                "--nonblocking",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    meter = CpuMeter(serve.process.pid)
    if door_or_grpc is None:
        url = f"127.0.0.1:{serve.grpc_port}"
        # one connection reaches one worker: two each when there are several (bench_grpc's)
        channels = 1 if serve.workers == 1 else 2 * serve.workers
        got = asyncio.run(grpc_point(name, url, concurrency, seconds, channels))
        result = {"req_s": got["rps"], "p50_ms": got["p50_ms"], "p99_ms": got["p99_ms"]}
        result["errors"] = got["errors"]
    else:
        load = load_wrk if shutil.which("wrk") else load_python
        result = load(
            serve.port,
            door_or_grpc.body,
            concurrency,
            seconds,
            path=door_or_grpc.path,
            headers=door_or_grpc.headers,
        )
    result.update(meter.cost(float(result["req_s"]) * seconds))
    if recorder is not None:
        recorder.wait(seconds + 30)
    return result


async def grpc_point(
    name: str, url: str, concurrency: int, seconds: int, channels: int = 1
) -> dict[str, float]:
    """``grpc``: ModelInfer calls; ``grpc-stream``: the same requests on ModelStreamInfer
    streams; ``grpc-live``: ServerLive calls, what gRPC costs this server with no work."""
    body = request_bytes(np.zeros((1, 784), np.float32))
    if name == "grpc-stream":
        return await grpc_stream_load(url, body, concurrency, seconds, channels)
    if name == "grpc-live":
        return await grpc_load(url, b"", concurrency, seconds, channels, method=LIVE)
    return await grpc_load(url, body, concurrency, seconds, channels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trees", default="new=.", help="label=path,... (A B A B in a round)")
    parser.add_argument(
        "--doors",
        default="v2-json,v2-binary,predictions,tfserving,grpc",
        help="also grpc-stream (ModelStreamInfer), grpc-live (ServerLive: gRPC's own cost)",
    )
    parser.add_argument("--concurrency", default="1,32")
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=1, help="serve --workers")
    parser.add_argument("--py-spy", dest="spy", help="py-spy's path: a raw profile per point")
    args = parser.parse_args()
    trees = dict(item.split("=", 1) for item in args.trees.split(","))
    wanted = args.doors.split(",")
    levels = [int(c) for c in args.concurrency.split(",")]
    RESULTS.mkdir(parents=True, exist_ok=True)
    model = demo_mlp_bytes(inputs=784, hidden=256, outputs=10, seed=0)
    row = np.random.default_rng(0).random((1, 784), dtype=np.float32)
    expected = ort.InferenceSession(model).run(None, {"INPUT__0": row})[0]
    all_doors = doors(row)
    stack, endpoint = start_stack()
    points: list[dict[str, object]] = []
    try:
        s3 = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
        )
        s3.put_object(Bucket="lambdaserve-models", Key="models/mlp/config.pbtxt", Body=CONFIG)
        s3.put_object(Bucket="lambdaserve-models", Key="models/mlp/1/model.onnx", Body=model)
        time.sleep(3)  # the event pump reconciles the upload into the catalog
        with tempfile.TemporaryDirectory() as work:
            for round_number in range(args.rounds):
                for name in wanted:
                    for concurrency in levels:
                        # A B, then B A: neither tree always goes first
                        order = list(trees.items())
                        for label, tree in order[:: -1 if round_number % 2 else 1]:
                            serve = Serve(Path(tree), endpoint, f"{work}/{label}", args.workers)
                            try:
                                door = all_doors.get(name)
                                if door is not None:
                                    check(serve, name, door, expected)
                                measure(serve, (name, door), 4, seconds=1)  # warm-up
                                got = measure(
                                    serve,
                                    (name, door),
                                    concurrency,
                                    seconds=args.seconds,
                                    spy=args.spy,
                                )
                            finally:
                                serve.stop()
                            point = {"tree": label, "round": round_number, "door": name}
                            point |= {"concurrency": concurrency, **got}
                            points.append(point)
                            print(json.dumps(point), flush=True)
    finally:
        stack.terminate()
        stack.wait(30)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (RESULTS / f"hot-path-{stamp}.json").write_text(json.dumps(points, indent=1))
    print(table(points, list(trees)))


def table(points: list[dict[str, object]], labels: list[str]) -> str:
    """Medians over rounds: req/s, p50/p99, server CPU ms per request, per tree; and A/B."""
    lines = ["| door | c | " + " | ".join(labels) + " | req/s ratio | CPU/req ratio |"]
    lines.append("|---" * (len(labels) + 4) + "|")
    keys = sorted({(p["door"], p["concurrency"]) for p in points}, key=str)
    for door, concurrency in keys:
        cells, rps, cpu = [], [], []
        for label in labels:
            mine = [
                p
                for p in points
                if (p["door"], p["concurrency"], p["tree"]) == (door, concurrency, label)
            ]
            r = statistics.median(float(p["req_s"]) for p in mine)  # type: ignore[arg-type]
            p50 = statistics.median(float(p["p50_ms"]) for p in mine)  # type: ignore[arg-type]
            p99 = statistics.median(float(p["p99_ms"]) for p in mine)  # type: ignore[arg-type]
            c = statistics.median(float(p["server_cpu_s_per_1k"]) for p in mine)  # type: ignore[arg-type]
            cells.append(f"{r:,.0f} — {p50:.2f} / {p99:.1f} ms — {c:.3f} ms CPU")
            rps.append(r)
            cpu.append(c)
        ratio = f"{rps[0] / rps[1]:.2f}x" if len(rps) > 1 else ""
        cpu_ratio = f"{cpu[0] / cpu[1]:.2f}x" if len(cpu) > 1 else ""
        lines.append(
            f"| {door} | {concurrency} | " + " | ".join(cells) + f" | {ratio} | {cpu_ratio} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
