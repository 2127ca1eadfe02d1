"""What grpcio's Python server costs per ModelInfer by itself, in three shapes, in one run.

The server answers ``ModelInfer`` with a fixed 10-float answer after one hop through its event
loop (a future set by a callback, as the dynamic batcher's is): no model, no decoding beyond
protobuf's, so the CPU per call is the gRPC machinery's floor. The shapes:

- ``aio``: ``grpc.aio`` with the generated servicer, in a uvloop loop (what ``serve`` runs);
- ``aio-generic``: ``grpc.aio`` with a generic handler taking and giving bytes, the request
  parsed and the answer serialized by the handler (no servicer wrapper);
- ``sync``: ``grpc.server`` with a thread pool, each call handed to an event loop thread with
  ``asyncio.run_coroutine_threadsafe`` (how a sync server would reach the batcher).

Each point is a fresh server process, loaded by ``bench_grpc``'s grpc.aio client (the same
request bytes, the calls over 2 connections); shapes alternate (A B C, then C B A), CPU from
/proc for the server's process tree (``cpu_cost``).

    python scripts/bench_grpc_servers.py [--shapes aio,aio-generic,sync] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import threading
from concurrent import futures
from typing import Any

import grpc
import numpy as np
from bench_grpc import _load, request_bytes
from cpu_cost import CpuMeter
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from lambdaserve.local.emulator import free_port, wait_for_port

SERVICE = "inference.GRPCInferenceService"
ANSWER = np.arange(10, dtype="<f4").tobytes()


async def _answer(request: Any) -> Any:
    """One hop through the loop, as a batched request waits on its future; then the answer."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    loop.call_soon(done.set_result, None)
    await done
    response = pb.ModelInferResponse(model_name=request.model_name, model_version="1")
    response.outputs.add(name="OUTPUT__0", datatype="FP32", shape=[1, 10])
    response.raw_output_contents.append(ANSWER)
    return response


class _Servicer(service_pb2_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]
    async def ModelInfer(self, request: Any, context: Any) -> Any:
        return await _answer(request)


def _bytes_handler(infer: Any) -> Any:
    return grpc.method_handlers_generic_handler(
        SERVICE, {"ModelInfer": grpc.unary_unary_rpc_method_handler(infer)}
    )


async def _serve_aio(port: int, generic: bool) -> None:
    server = grpc.aio.server()
    if generic:

        async def infer(raw: bytes, context: Any) -> bytes:
            answer = await _answer(pb.ModelInferRequest.FromString(raw))
            return bytes(answer.SerializeToString())

        server.add_generic_rpc_handlers((_bytes_handler(infer),))
    else:
        service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(_Servicer(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


def _serve_sync(port: int, threads: int) -> None:
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    def infer(raw: bytes, context: Any) -> bytes:
        request = pb.ModelInferRequest.FromString(raw)
        answer = asyncio.run_coroutine_threadsafe(_answer(request), loop).result()
        return bytes(answer.SerializeToString())

    server = grpc.server(futures.ThreadPoolExecutor(threads))
    server.add_generic_rpc_handlers((_bytes_handler(infer),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    server.wait_for_termination()


def point(shape: str, concurrency: int, seconds: int, threads: int) -> dict[str, Any]:
    """One server of ``shape`` in its own process, loaded at ``concurrency``."""
    port = free_port()
    command = [sys.executable, __file__, "--serve", shape, "--port", str(port)]
    server = subprocess.Popen([*command, "--threads", str(threads)])
    try:
        wait_for_port("127.0.0.1", port, 30)
        body = request_bytes(np.zeros((1, 784), np.float32))
        url = f"127.0.0.1:{port}"
        asyncio.run(_load(url, body, 4, 1, 2))  # warm-up
        meter = CpuMeter(server.pid)
        got = asyncio.run(_load(url, body, concurrency, seconds, 2))
        got.update(meter.cost(got["requests"]))
    finally:
        server.terminate()
        server.wait(30)
    return {"shape": shape, "concurrency": concurrency, **got}


def table(points: list[dict[str, Any]], shapes: list[str]) -> str:
    """Medians over rounds: req/s, p50/p99 and server CPU s per 1,000 calls per shape."""
    lines = ["| shape | c | req/s | p50 / p99 ms | server CPU s/1k | vs first |", "|---" * 6 + "|"]
    first: dict[int, float] = {}
    for concurrency in sorted({p["concurrency"] for p in points}):
        for shape in shapes:
            mine = [p for p in points if (p["shape"], p["concurrency"]) == (shape, concurrency)]
            rps = statistics.median(p["rps"] for p in mine)
            p50 = statistics.median(p["p50_ms"] for p in mine)
            p99 = statistics.median(p["p99_ms"] for p in mine)
            cpu = statistics.median(p["server_cpu_s_per_1k"] for p in mine)
            base = first.setdefault(concurrency, cpu)
            lines.append(
                f"| {shape} | {concurrency} | {rps:,.0f} | {p50:.2f} / {p99:.1f} | {cpu:.3f} "
                f"| {cpu / base:.2f}x |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shapes", default="aio,aio-generic,sync")
    parser.add_argument("--concurrency", default="32")
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=16, help="the sync server's pool")
    parser.add_argument("--serve", help=argparse.SUPPRESS)  # a point's server process
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve == "sync":
        _serve_sync(args.port, args.threads)
        return
    if args.serve:
        import uvloop

        uvloop.run(_serve_aio(args.port, args.serve == "aio-generic"))
        return
    shapes = args.shapes.split(",")
    points = []
    for round_number in range(args.rounds):
        for concurrency in (int(c) for c in args.concurrency.split(",")):
            for shape in shapes[:: -1 if round_number % 2 else 1]:
                got = point(shape, concurrency, args.seconds, args.threads)
                points.append(got)
                print(json.dumps(got), flush=True)
    print(table(points, shapes))


if __name__ == "__main__":
    main()
