"""gRPC side by side: `lambdaserve serve --grpc-port` against Triton's own gRPC front end
(nvidia-pytriton's bundled tritonserver), one run, this machine, ratios; and lambdaserve's own
gRPC path beside its HTTP path (binary tensors) on the same server.

The model, the request and the batching are those of `bench_peers.py` (MLP 784->256->10, one
row of 784 floats, max batch 8, delay 0): a `ModelInferRequest` with the row in
`raw_input_contents` (what tritonclient sends), serialized once and sent as bytes by a
grpc.aio load generator (concurrency 1, 8, 32 calls in flight on one channel, as one
tritonclient.grpc.aio client), so client-side encoding costs both servers the same. Every
point checks an answer against onnxruntime run directly.

    python scripts/bench_grpc.py [--seconds 10] [--peers lambdaserve,grpcio,triton] [--stream]

``lambdaserve`` is ``serve`` as it ships (pygrpc-native's gRPC server); ``grpcio`` the same
with ``serve --grpc-server grpcio``.

``--stream`` sends the same requests on ModelStreamInfer instead (each call in flight on a
stream of its own, its answer read before the next is sent), to both servers.

Writes bench/results/grpc-<time>.json; `make bench-peers` runs it after bench_peers.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from bench_batching import load_python
from bench_peers import (
    RESULTS,
    Ours,
    Running,
    _wait_answering,
    available_cores,
    build_models,
    start_triton,
    stop,
    worker_counts,
)
from cpu_cost import CpuMeter
from tritonclient.grpc import service_pb2

CONCURRENCY = (1, 8, 32)
GRPCIO = "lambdaserve-grpcio"  # serve --grpc-server grpcio (the default is pygrpc-native's)
INFER = "/inference.GRPCInferenceService/ModelInfer"
STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"


def request_bytes(row: np.ndarray) -> bytes:
    message = service_pb2.ModelInferRequest(model_name="mlp")
    message.inputs.add(name="INPUT__0", datatype="FP32", shape=list(row.shape))
    message.raw_input_contents.append(row.astype("<f4").tobytes())
    return message.SerializeToString()


def answer(raw: bytes) -> np.ndarray:
    response = service_pb2.ModelInferResponse.FromString(raw)
    return np.frombuffer(response.raw_output_contents[0], "<f4").reshape(1, -1)


async def _load(
    url: str,
    body: bytes,
    concurrency: int,
    seconds: float,
    channels: int = 1,
    *,
    method: str = INFER,
) -> dict[str, float]:
    # each channel its own connection (grpc.use_local_subchannel_pool), as separate clients
    options = [
        ("grpc.max_receive_message_length", 64 * 1024**2),
        ("grpc.use_local_subchannel_pool", 1),
    ]
    opened = [grpc.aio.insecure_channel(url, options=options) for _ in range(channels)]
    try:
        calls = [c.unary_unary(method) for c in opened]  # bytes in, bytes out: no encoding
        for call in calls:
            await call(body)
        latencies: list[float] = []
        errors = 0
        deadline = time.monotonic() + seconds

        async def worker(index: int) -> None:
            nonlocal errors
            call = calls[index % len(calls)]
            while time.monotonic() < deadline:
                started = time.perf_counter()
                try:
                    await call(body, timeout=30)
                except grpc.aio.AioRpcError:
                    errors += 1
                    continue
                latencies.append(time.perf_counter() - started)

        started = time.monotonic()
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
        elapsed = time.monotonic() - started
    finally:
        for channel in opened:
            await channel.close()
    return _summary(latencies, elapsed, errors)


async def _load_stream(
    url: str, body: bytes, concurrency: int, seconds: float, channels: int = 1
) -> dict[str, float]:
    """``concurrency`` ModelStreamInfer streams, each with one request in flight at a time
    (sent, its answer read, the next sent), spread over ``channels`` connections."""
    options = [("grpc.use_local_subchannel_pool", 1)]
    opened = [grpc.aio.insecure_channel(url, options=options) for _ in range(channels)]
    latencies: list[float] = []
    errors = 0
    try:
        streams = [opened[i % channels].stream_stream(STREAM)() for i in range(concurrency)]
        deadline = time.monotonic() + seconds

        async def worker(stream: Any) -> None:
            nonlocal errors
            while time.monotonic() < deadline:
                started = time.perf_counter()
                await stream.write(body)
                raw = await stream.read()
                if service_pb2.ModelStreamInferResponse.FromString(raw).error_message:
                    errors += 1
                    continue
                latencies.append(time.perf_counter() - started)
            await stream.done_writing()

        started = time.monotonic()
        await asyncio.gather(*(worker(stream) for stream in streams))
        elapsed = time.monotonic() - started
    finally:
        for channel in opened:
            await channel.close()
    return _summary(latencies, elapsed, errors)


def _summary(latencies: list[float], elapsed: float, errors: int) -> dict[str, float]:
    latencies.sort()
    return {
        "rps": round(len(latencies) / elapsed, 1),
        "p50_ms": round(statistics.median(latencies) * 1000, 3),
        "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1] * 1000, 3),
        "errors": errors,
        "requests": len(latencies),
    }


def check(url: str, body: bytes, expected: np.ndarray) -> None:
    async def once() -> bytes:
        async with grpc.aio.insecure_channel(url) as channel:
            raw: bytes = await channel.unary_unary(INFER)(body, timeout=30)
            return raw

    np.testing.assert_allclose(answer(asyncio.run(once())), expected, rtol=1e-4, atol=1e-6)


def measure(
    running: Running,
    expected: np.ndarray,
    body: bytes,
    seconds: int,
    channels: int,
    *,
    stream: bool = False,
) -> list[dict[str, Any]]:
    url = f"127.0.0.1:{running.extra['grpc_port']}"
    points = []
    try:
        _wait_answering(running, expected)
        check(url, body, expected)
        asyncio.run(_load(url, body, 4, 2))  # warm-up
        for concurrency in CONCURRENCY:
            meter = CpuMeter(running.process.pid)
            load = _load_stream if stream else _load
            result = asyncio.run(load(url, body, concurrency, seconds, min(channels, concurrency)))
            result.update(meter.cost(float(result["rps"]) * seconds))
            check(url, body, expected)
            points.append(
                {
                    "server": running.name,
                    "protocol": "grpc-stream" if stream else "grpc",
                    "concurrency": concurrency,
                    **result,
                    **running.extra,
                    "channels": min(channels, concurrency),
                }
            )
            print(json.dumps(points[-1]), flush=True)
        if running.name == "lambdaserve" and not stream:  # its HTTP path, binary tensors, c=1
            call = running.calls["binary"]
            http = load_python(
                running.port, call.body, 1, seconds, path=running.path, headers=call.headers
            )
            measured = {
                "rps": round(http["req_s"], 1),
                "p50_ms": round(http["p50_ms"], 3),
                "p99_ms": round(http["p99_ms"], 3),
                "errors": http["errors"],
            }
            points.append(
                {"server": running.name, "protocol": "http-binary", "concurrency": 1, **measured}
            )
            print(json.dumps(points[-1]), flush=True)
    finally:
        stop(running)
    return points


@contextlib.contextmanager
def grpc_server(kind: str) -> Iterator[None]:
    """``serve`` started meanwhile runs ``kind``'s gRPC server (serve --grpc-server)."""
    before = os.environ.get("LAMBDASERVE_GRPC_SERVER")
    os.environ["LAMBDASERVE_GRPC_SERVER"] = kind
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("LAMBDASERVE_GRPC_SERVER")
        else:
            os.environ["LAMBDASERVE_GRPC_SERVER"] = before


def servers_table(points: list[dict[str, Any]]) -> str:
    """serve's pygrpc-native server against its grpcio one, the same servicers (``--peers
    lambdaserve,grpcio``)."""
    lines = [
        "| concurrency | grpcio req/s | p50 / p99 ms | CPU s / 1k req | pygrpc-native req/s "
        "| p50 / p99 ms | CPU s / 1k req | req/s ratio | p99 ratio |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for concurrency, grpcio, native in paired(points, GRPCIO, "lambdaserve"):
        lines.append(
            f"| {concurrency} | {grpcio['rps']} | {grpcio['p50_ms']} / {grpcio['p99_ms']} | "
            f"{grpcio.get('server_cpu_s_per_1k')} | {native['rps']} | {native['p50_ms']} / "
            f"{native['p99_ms']} | {native.get('server_cpu_s_per_1k')} | "
            f"{native['rps'] / grpcio['rps']:.2f}x | {native['p99_ms'] / grpcio['p99_ms']:.2f}x |"
        )
    return "\n".join(lines) if len(lines) > 2 else ""


def paired(
    points: list[dict[str, Any]], first: str, second: str
) -> Iterator[tuple[int, dict[str, Any], dict[str, Any]]]:
    """Each concurrency both servers were measured at (on the streams with ``--stream``)."""
    by = {(p["server"], p["protocol"], p["concurrency"]): p for p in points}
    protocol = "grpc-stream" if any(p["protocol"] == "grpc-stream" for p in points) else "grpc"
    for concurrency in CONCURRENCY:
        one, other = by.get((first, protocol, concurrency)), by.get((second, protocol, concurrency))
        if one is not None and other is not None:
            yield concurrency, one, other


def table(points: list[dict[str, Any]]) -> str:
    by = {(p["server"], p["protocol"], p["concurrency"]): p for p in points}
    lines = [
        f"workers/instances: {worker_counts(points)} ({available_cores()} cores available); "
        f"client connections: {max((p.get('channels', 1) for p in points), default=1)}\n",
        "| concurrency | lambdaserve gRPC req/s | p50 / p99 ms | CPU s / 1k req | Triton "
        "(pytriton) gRPC req/s | p50 / p99 ms | CPU s / 1k req | req/s ratio | CPU ratio "
        "| load generator CPU s / 1k req (ours / Triton's points) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for concurrency, ours, triton in paired(points, "lambdaserve", "triton"):
        ours_cpu, triton_cpu = ours.get("server_cpu_s_per_1k"), triton.get("server_cpu_s_per_1k")
        cpu_ratio = f"{ours_cpu / triton_cpu:.2f}x" if ours_cpu and triton_cpu else ""
        lines.append(
            f"| {concurrency} | {ours['rps']} | {ours['p50_ms']} / {ours['p99_ms']} | {ours_cpu} | "
            f"{triton['rps']} | {triton['p50_ms']} / {triton['p99_ms']} | {triton_cpu} | "
            f"{ours['rps'] / triton['rps']:.2f}x | {cpu_ratio} | "
            f"{ours.get('load_cpu_s_per_1k')} / {triton.get('load_cpu_s_per_1k')} |"
        )
    http = by.get(("lambdaserve", "http-binary", 1))
    grpc1 = by.get(("lambdaserve", "grpc", 1))
    if http and grpc1:
        lines.append(
            f"\nlambdaserve at c=1: gRPC p50 {grpc1['p50_ms']} ms vs HTTP (binary) p50 "
            f"{http['p50_ms']} ms; gRPC/HTTP req/s {grpc1['rps'] / http['rps']:.2f}x"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--peers", default="lambdaserve,triton")
    parser.add_argument(
        "--workers",
        type=int,
        default=available_cores(),
        help="Triton instances (default: the cores available)",
    )
    parser.add_argument(
        "--ours-workers",
        type=int,
        default=None,
        help="lambdaserve serve --workers (default: --workers, the same cores as Triton)",
    )
    parser.add_argument(
        "--channels",
        type=int,
        default=None,
        help="client connections the calls spread over (default: 2 per lambdaserve worker: "
        "the workers share the port per connection, so one connection reaches one worker)",
    )
    parser.add_argument(
        "--stream",
        action="store_true",
        help="ModelStreamInfer: each of the c calls in flight on a stream of its own",
    )
    args = parser.parse_args()
    if args.ours_workers is None:
        args.ours_workers = args.workers
    if args.channels is None:
        args.channels = 2 * args.ours_workers
    wanted = args.peers.split(",")
    RESULTS.mkdir(parents=True, exist_ok=True)
    points: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        onnx_path, _, row, expected = build_models(work)
        body = request_bytes(row)
        for server in ("lambdaserve", "grpcio"):
            if server not in wanted:
                continue
            ours = Ours(onnx_path)
            try:
                with grpc_server("grpcio" if server == "grpcio" else "native"):
                    running = ours.start(work, 0, row, args.ours_workers)
                if server == "grpcio":
                    running.name = GRPCIO
                points += measure(
                    running, expected, body, args.seconds, args.channels, stream=args.stream
                )
            finally:
                ours.close()
        if "triton" in wanted:
            running = start_triton(work, onnx_path, 0, row, args.workers)
            points += measure(
                running, expected, body, args.seconds, args.channels, stream=args.stream
            )
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (RESULTS / f"grpc-{stamp}.json").write_text(json.dumps(points, indent=1))
    print(table(points))
    print(servers_table(points))


if __name__ == "__main__":
    main()
