"""A 3-step pipeline (Python pre -> ONNX MLP -> Python post) through lambdaserve, against the
same steps called directly, a TorchServe workflow and one pytriton callable: one run, ratios.

pre normalizes 784 pixels, (x - 0.5) / 0.25, and post is a softmax (Triton python_backend
models in scripts/peers/pipeline_repo/); between them the MLP 784->256->10 (seeded, ONNX,
logits) in onnxruntime; published to the emulator's bucket as the ensemble `pipe`. Measured:

1. floor: the pre body, InferenceSession.run and the post body, called directly;
2. the Lambda warm path (the infer handler in-process, API Gateway v2 events, moto) for the
   ensemble and each step alone; overhead per step = (ensemble - floor) / 3 (goal <= 60 us);
3. over HTTP at c=1 and c=32, one JSON row of 784 floats per request, no batching anywhere:
   `lambdaserve serve` (v2 infer), TorchServe 0.12.0 as a workflow (/wfpredict: pre and post
   are workflow functions, the MLP a model whose handler runs the same ONNX through
   onnxruntime), and Triton via nvidia-pytriton (the three steps as one bound callable).
   A peer that cannot install or start is reported and skipped; the rest still run.

    python scripts/bench_pipelines.py [--seconds 10] [--peers lambdaserve,torchserve,pytriton]

Writes bench/results/pipelines-<time>.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from bench_infer import per_call_us, warm_infer_function
from bench_peers import Running, _wait_answering, check, load, measure, rss_mb
from peers.pipeline_peers import (
    Ours,
    logits_onnx,
    repository_files,
    start_pytriton,
    start_torchserve_workflow,
    stop_tree,
    v2_call,
)

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"
CONCURRENCY = (1, 32)
Point = dict[str, Any]  # one server at one concurrency
OTHER_CPU_LIMIT = 0.3  # cores used by anything else before a point is repeated (once)


def pre(x: np.ndarray) -> np.ndarray:  # the body of pipeline_repo/pre/1/model.py
    return ((x - 0.5) / 0.25).astype(np.float32)


def post(x: np.ndarray) -> np.ndarray:  # the body of pipeline_repo/post/1/model.py
    e = np.exp(x - x.max(axis=1, keepdims=True))
    probs: np.ndarray = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
    return probs


def v2_body(name: str, array: np.ndarray) -> bytes:
    tensor = {
        "name": name,
        "datatype": "FP32",
        "shape": list(array.shape),
        "data": array.ravel().tolist(),
    }
    return json.dumps({"inputs": [tensor]}).encode()


def floor_us(session: ort.InferenceSession, row: np.ndarray, count: int) -> dict[str, float]:
    pixels = pre(row)
    logits = session.run(None, {"INPUT__0": pixels})[0]

    def pipeline() -> np.ndarray:
        return post(session.run(None, {"INPUT__0": pre(row)})[0])

    timed: dict[str, Callable[[], object]] = {
        "pre": lambda: pre(row),
        "mlp": lambda: session.run(None, {"INPUT__0": pixels}),
        "post": lambda: post(logits),
        "pipe": pipeline,
    }
    return {name: statistics.median(per_call_us(call, count)) for name, call in timed.items()}


def lambda_warm_path_us(
    files: dict[str, bytes], bodies: dict[str, bytes], expected: np.ndarray, count: int
) -> dict[str, float]:
    """p50 of the infer Lambda's warm path per model, in-process against moto."""
    from moto import mock_aws

    from lambdaserve.local.http_api_event import http_api_event

    # the handler prints an EMF line per model per invocation, as in Lambda; one write each
    sink = open(os.devnull, "w", buffering=1)  # noqa: SIM115
    with tempfile.TemporaryDirectory() as work, mock_aws(), sink, contextlib.redirect_stdout(sink):
        # steps first, as uploads would settle
        handler = warm_infer_function(files, ("pre", "mlp", "post", "pipe"), work)
        out: dict[str, float] = {}
        for name, body in bodies.items():
            event = http_api_event("POST", f"/v2/models/{name}/infer", body)
            response = handler(event)
            assert response["statusCode"] == 200, response
            if name == "pipe":
                answer = json.loads(response["body"])["outputs"][0]["data"]
                np.testing.assert_allclose(answer, expected.ravel(), rtol=1e-4, atol=1e-6)
            out[name] = statistics.median(per_call_us(lambda e=event: handler(e), count))
    return out


def node_timeouts(log: str | None) -> int:
    """Lines where TorchServe's workflow gave up waiting for a node (it then retries it)."""
    if log is None or not Path(log).exists():
        return 0
    return Path(log).read_bytes().count(b"Timed out while executing")


def run_server(start: Callable[[], Running], expected: np.ndarray, seconds: int) -> list[Point]:
    running = start()
    log = running.extra.pop("log", None)
    points: list[Point] = []
    try:
        _wait_answering(running, expected, timeout_s=240)
        startup = round(time.monotonic() - running.spawned_at, 2)
        load(running, "json", 4, 2)  # warm-up
        for concurrency in CONCURRENCY:
            timeouts = node_timeouts(log)
            result = measure(running, "json", concurrency, seconds)
            repeated = 0
            if float(result["other_cpu_cores"]) > OTHER_CPU_LIMIT:
                repeated = 1
                result = measure(running, "json", concurrency, seconds)
            check(running, expected)
            points.append(
                {
                    "server": running.name,
                    "concurrency": concurrency,
                    **result,
                    "repeated": repeated,
                    "node_timeouts": node_timeouts(log) - timeouts,
                    "rss_mb": rss_mb(running.process.pid),
                    "startup_s": startup,
                    **running.extra,
                }
            )
            print(json.dumps(points[-1]), flush=True)
    finally:
        stop_tree(running)
    return points


def http_table(points: list[Point]) -> str:
    lines = [
        f"{'server':<14}{'c':>4}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'c/rate ms':>10}{'err':>5}"
        f"{'stall':>6}{'RSS MB':>8}{'other':>7}{'ours/peer req/s':>17}{'p50':>8}"
    ]
    ours = {p["concurrency"]: p for p in points if p["server"] == "lambdaserve"}
    for p in points:
        mine, ratio, p50 = ours.get(p["concurrency"]), "", ""
        if mine and p["server"] != "lambdaserve":
            ratio = f"{float(mine['req_s']) / float(p['req_s']):.2f}x"
            p50 = f"{float(mine['p50_ms']) / float(p['p50_ms']):.2f}x"
        lines.append(
            f"{p['server']:<14}{p['concurrency']:>4}{float(p['req_s']):>9.0f}"
            f"{float(p['p50_ms']):>9.2f}{float(p['p99_ms']):>9.2f}"
            f"{1000 * int(p['concurrency']) / float(p['req_s']):>10.2f}{int(p['errors']):>5}"
            f"{int(p['node_timeouts']):>6}{float(p['rss_mb']):>8.0f}"
            f"{float(p['other_cpu_cores']):>7.2f}{ratio:>17}{p50:>8}"
        )
    return "\n".join(lines)


def warm_table(floor: dict[str, float], warm: dict[str, float]) -> str:
    lines = [f"{'model':<22}{'floor us':>10}{'Lambda warm us':>16}{'overhead us':>13}"]
    for name, label in (("pre", "pre alone"), ("mlp", "mlp alone"), ("post", "post alone")):
        lines.append(
            f"{label:<22}{floor[name]:>10.1f}{warm[name]:>16.1f}{warm[name] - floor[name]:>13.1f}"
        )
    per_step = (warm["pipe"] - floor["pipe"]) / 3
    # what the two Python steps add to a request that serves the MLP anyway
    added = (warm["pipe"] - warm["mlp"] - floor["pre"] - floor["post"]) / 2
    lines += [
        f"{'pipe (ensemble, 3)':<22}{floor['pipe']:>10.1f}{warm['pipe']:>16.1f}"
        f"{warm['pipe'] - floor['pipe']:>13.1f}",
        f"overhead per step = (ensemble - floor) / 3 = {per_step:.1f} us (goal <= 60 us); "
        f"ensemble = {warm['pipe'] / floor['pipe']:.1f}x floor",
        f"each added Python step, over serving the MLP alone: {added:.1f} us",
    ]
    return "\n".join(lines)


def run_servers(
    args: argparse.Namespace,
    files: dict[str, bytes],
    logits: bytes,
    row: np.ndarray,
    expected: np.ndarray,
) -> tuple[list[Point], dict[str, str]]:
    """Each server in turn at c=1 and c=32; a peer that cannot run is skipped, with why."""
    wanted = args.peers.split(",")
    points: list[Point] = []
    skipped: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        (work / "logits.onnx").write_bytes(logits)
        starters: dict[str, Callable[[], Running]] = {}
        ours = Ours(files) if "lambdaserve" in wanted else None
        try:
            if ours is not None:
                starters["lambdaserve"] = lambda: ours.start(work, row, args.ours_workers)
            if "torchserve" in wanted:
                starters["torchserve-wf"] = lambda: start_torchserve_workflow(
                    work, work / "logits.onnx", row, args.workers
                )
            if "pytriton" in wanted:
                starters["pytriton"] = lambda: start_pytriton(
                    work, work / "logits.onnx", row, args.instances
                )
            for name, start in starters.items():
                try:
                    points += run_server(start, expected, args.seconds)
                except Exception as exc:  # a peer that cannot run is reported, not fatal
                    skipped[name] = f"{type(exc).__name__}: {str(exc)[:300]}"
                    print(f"{name}: skipped, it could not be run here: {skipped[name]}", flush=True)
        finally:
            if ours is not None:
                ours.close()
    return points, skipped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--peers", default="lambdaserve,torchserve,pytriton")
    parser.add_argument("--workers", type=int, default=2, help="TorchServe workers per node")
    parser.add_argument("--instances", type=int, default=2, help="pytriton callable instances")
    parser.add_argument("--ours-workers", type=int, default=1, help="lambdaserve serve --workers")
    args = parser.parse_args()
    logits = logits_onnx()
    files = repository_files(logits)
    row = np.random.default_rng(0).random((1, 784), dtype=np.float32)
    session = ort.InferenceSession(logits, providers=["CPUExecutionProvider"])
    pixels = pre(row)
    logit_row = session.run(None, {"INPUT__0": pixels})[0]
    expected = post(logit_row)

    floor = floor_us(session, row, args.requests)
    bodies = {
        "pre": v2_body("INPUT0", row),
        "mlp": v2_body("INPUT__0", pixels),
        "post": v2_body("INPUT0", logit_row),
        "pipe": v2_call(row).body,
    }
    warm = lambda_warm_path_us(files, bodies, expected, args.requests)
    print(warm_table(floor, warm), flush=True)

    points, skipped = run_servers(args, files, logits, row, expected)
    print(
        "\nHTTP, one JSON row of 784 floats per request, no batching; ratio = ours / peer.\n"
        "p50/p99 are of the answers that came back in the window; c/rate ms = c / (req/s), the\n"
        "mean time per request a closed loop saw, stalls included; stall = TorchServe workflow\n"
        "nodes that missed their 10 s timeout-ms and were retried."
    )
    print(http_table(points))
    for name, why in skipped.items():
        print(f"{name}: not measured: {why}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    document = {"floor_us": floor, "lambda_warm_us": warm, "http": points, "skipped": skipped}
    path = RESULTS / f"pipelines-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(document, indent=1))
    print(f"results: {path}")


if __name__ == "__main__":
    main()
