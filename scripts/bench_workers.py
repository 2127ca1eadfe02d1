"""Throughput against cores: `lambdaserve serve --workers N` for N = 1..cores, beside
TorchServe with N workers and Triton (pytriton) with N instances, one run, this machine.

The model, request and batching of `bench_peers.py` (MLP 784->256->10, one row, max batch 8,
delay 0), its servers, load generator and checks; each point reports req/s, p50/p99, the
server's CPU seconds per 1,000 requests and req/s per core it used (`cpu_cost.py`). With
`--http uvicorn,granian` each of our points also runs the same ASGI app under granian.

    python scripts/bench_workers.py [--max-workers 2] [--concurrency 1,32] [--seconds 5]
        [--protocols json,binary] [--peers torchserve,triton] [--http uvicorn]

Writes bench/results/workers-<time>.json. The load generator runs on the same machine: on a
machine with few cores it takes cores from the servers as N grows (the `load s/1k` column).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from bench_peers import (
    RESULTS,
    Ours,
    Running,
    _wait_answering,
    build_models,
    check,
    load,
    measure,
    rss_mb,
    start_torchserve,
    start_triton,
    stop,
)


def run_points(
    start: Callable[[], Running],
    expected: np.ndarray,
    protocols: list[str],
    concurrency: list[int],
    seconds: int,
) -> list[dict[str, object]]:
    running = start()
    points: list[dict[str, object]] = []
    try:
        _wait_answering(running, expected)
        for protocol in (p for p in protocols if p in running.calls):
            check(running, expected, protocol)
            load(running, protocol, 4, 2)  # warm-up
            for clients in concurrency:
                result = measure(running, protocol, clients, seconds)
                check(running, expected, protocol)
                point = {"server": running.name, "protocol": protocol, "concurrency": clients}
                point |= {**result, "rss_mb": rss_mb(running.process.pid), **running.extra}
                points.append(point)
                print(json.dumps(point), flush=True)
    finally:
        stop(running)
    return points


def table(points: list[dict[str, object]]) -> str:
    lines = [
        f"{'server':<20}{'N':>3}{'proto':>7}{'c':>4}{'req/s':>8}{'p50 ms':>8}{'p99 ms':>8}"
        f"{'err':>5}{'cores':>6}{'cpu s/1k':>9}{'load s/1k':>10}{'req/s/core':>11}{'other':>6}"
    ]
    for p in points:
        name = str(p["server"]) + (f" ({p['http']})" if "http" in p else "")
        lines.append(
            f"{name:<20}{int(p['n']):>3}{p['protocol']:>7}{int(p['concurrency']):>4}"
            f"{float(p['req_s']):>8.0f}{float(p['p50_ms']):>8.2f}{float(p['p99_ms']):>8.2f}"
            f"{int(p['errors']):>5}{float(p['server_cores']):>6.2f}"
            f"{float(p['server_cpu_s_per_1k']):>9.3f}{float(p['load_cpu_s_per_1k']):>10.3f}"
            f"{float(p['req_s_per_core']):>11.0f}{float(p['other_cpu_cores']):>6.2f}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--concurrency", default="1,32")
    parser.add_argument("--protocols", default="json,binary")
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--peers", default="torchserve,triton", help="'' for ours alone")
    parser.add_argument("--http", default="uvicorn", help="uvicorn and/or granian, for ours")
    args = parser.parse_args()
    concurrency = [int(c) for c in args.concurrency.split(",")]
    protocols = args.protocols.split(",")
    peers = [p for p in args.peers.split(",") if p]
    RESULTS.mkdir(parents=True, exist_ok=True)
    points: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        onnx_path, torchscript_path, row, expected = build_models(work)
        ours = Ours(onnx_path)
        try:
            for n in range(1, args.max_workers + 1):
                starters: list[Callable[[], Running]] = [
                    lambda n=n, http=http: ours.start(work, 0, row, n, http)
                    for http in args.http.split(",")
                ]
                if "torchserve" in peers:
                    starters.append(lambda n=n: start_torchserve(work, torchscript_path, 0, row, n))
                if "triton" in peers:
                    starters.append(lambda n=n: start_triton(work, onnx_path, 0, row, n))
                for start in starters:
                    found = run_points(start, expected, protocols, concurrency, args.seconds)
                    points += [{**p, "n": n} for p in found]
        finally:
            ours.close()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (RESULTS / f"workers-{stamp}.json").write_text(json.dumps(points, indent=1))
    print(table(points))


if __name__ == "__main__":
    main()
