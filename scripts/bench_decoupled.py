"""A decoupled model's stream: python_backend's `repeat` (one response per element of IN,
then the final flag) on `lambdaserve serve` (tests/fixtures/python_models/repeat_int32,
published by upload) and on Triton through nvidia-pytriton's decoupled mode (the same
responses from a generator), one run, side by side.

tritonclient.grpc's stream (`start_stream`, `async_stream_infer`, empty final responses on)
sends one request of N elements at a time per stream and waits for its final response;
streams in parallel at c>1. Measured: responses per second, a request's p50 time to its
first response and to its final one. Every response's value and index are checked.

    python scripts/bench_decoupled.py [--seconds 10] [--elements 64] [--peers lambdaserve,pytriton]

Writes bench/results/decoupled-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import queue
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import tritonclient.grpc as grpcclient
from bench_batching import serve_environment, start_stack
from bench_peers import _spawn, _venv, pytriton_env
from peers.pipeline_peers import PYTRITON

from lambdaserve.local.emulator import free_port

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
MODEL = ROOT / "tests" / "fixtures" / "python_models" / "repeat_int32"
HERE = Path(__file__).resolve().parent / "peers"
CONCURRENCY = (1, 4)


class Server:
    def __init__(self, name: str, process: Any, grpc_url: str, cleanup: Any = None) -> None:
        self.name, self.process, self.grpc_url, self._cleanup = name, process, grpc_url, cleanup

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except Exception:
            self.process.kill()
        if self._cleanup:
            self._cleanup()


def start_ours(work: Path) -> Server:
    stack, endpoint = start_stack()
    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    for path in sorted(MODEL.rglob("*")):
        if path.is_file():
            key = f"models/repeat_int32/{path.relative_to(MODEL).as_posix()}"
            s3.put_object(Bucket="lambdaserve-models", Key=key, Body=path.read_bytes())
    grpc_port = free_port()
    env = serve_environment(endpoint, str(work / "ours"), LAMBDASERVE_PYTHON_MODELS="1")
    command = [sys.executable, "-m", "lambdaserve.cli", "serve", "--port", str(free_port())]
    process = _spawn([*command, "--grpc-port", str(grpc_port)], env, work / "ours.out")

    def stop_stack() -> None:
        stack.terminate()
        stack.wait(30)

    return Server("lambdaserve", process, f"127.0.0.1:{grpc_port}", stop_stack)


def start_pytriton(work: Path) -> Server:
    venv = _venv("triton", PYTRITON)
    home = work / "pytriton"
    home.mkdir(exist_ok=True)
    python = venv / "bin" / "python"
    ports = [str(free_port()) for _ in range(3)]
    process = _spawn(
        [str(python), str(HERE / "pytriton_repeat.py"), *ports],
        pytriton_env(python, home),
        home / "triton.out",
    )
    return Server("pytriton", process, f"127.0.0.1:{ports[1]}")


def wait_ready(server: Server, timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"{server.name} exited with {server.process.returncode}")
        try:
            with grpcclient.InferenceServerClient(server.grpc_url) as client:
                if client.is_model_ready("repeat_int32"):
                    return
        except Exception:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{server.name}: repeat_int32 not ready in {timeout_s} s")


class Stream:
    """One tritonclient stream sending one request at a time."""

    def __init__(self, url: str, elements: int) -> None:
        self._client = grpcclient.InferenceServerClient(url)
        self._answers: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._client.start_stream(callback=lambda result, error: self._answers.put((result, error)))
        values = np.arange(elements, dtype=np.int32)
        self._input = grpcclient.InferInput("IN", [elements], "INT32")
        self._input.set_data_from_numpy(values)
        self._values = values

    def request(self) -> tuple[float, float, int]:
        """Seconds to the first response and to the final one, and the responses counted."""
        started = time.perf_counter()
        self._client.async_stream_infer(
            "repeat_int32", [self._input], enable_empty_final_response=True
        )
        first, count = 0.0, 0
        while True:
            result, error = self._answers.get(timeout=30)
            if error is not None:
                raise RuntimeError(str(error))
            response = result.get_response()
            final = response.parameters["triton_final_response"].bool_param
            if result.as_numpy("OUT") is not None:
                index = int(result.as_numpy("IDX")[0])
                assert int(result.as_numpy("OUT")[0]) == int(self._values[index])
                if count == 0:
                    first = time.perf_counter() - started
                count += 1
            if final:
                break
        assert count == len(self._values), (count, len(self._values))
        return first, time.perf_counter() - started, count

    def close(self) -> None:
        self._client.stop_stream()
        self._client.close()


def measure(server: Server, concurrency: int, elements: int, seconds: float) -> dict[str, Any]:
    streams = [Stream(server.grpc_url, elements) for _ in range(concurrency)]
    for stream in streams:
        stream.request()  # warm-up
    firsts: list[float] = []
    finals: list[float] = []
    responses = [0]
    lock = threading.Lock()
    stop_at = time.perf_counter() + seconds

    def run(stream: Stream) -> None:
        while time.perf_counter() < stop_at:
            first, final, count = stream.request()
            with lock:
                firsts.append(first)
                finals.append(final)
                responses[0] += count

    started = time.perf_counter()
    threads = [threading.Thread(target=run, args=(s,)) for s in streams]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    for stream in streams:
        stream.close()
    return {
        "server": server.name,
        "concurrency": concurrency,
        "elements": elements,
        "requests": len(finals),
        "responses_per_s": round(responses[0] / elapsed, 1),
        "first_p50_ms": round(1000 * statistics.median(firsts), 3),
        "final_p50_ms": round(1000 * statistics.median(finals), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--elements", type=int, default=64)
    parser.add_argument("--peers", default="lambdaserve,pytriton")
    args = parser.parse_args()
    starters = {"lambdaserve": start_ours, "pytriton": start_pytriton}
    points: list[dict[str, Any]] = []
    import tempfile

    with tempfile.TemporaryDirectory() as work:
        for name in args.peers.split(","):
            try:
                server = starters[name](Path(work))
            except Exception as exc:
                print(f"{name}: cannot start ({exc}); skipped", flush=True)
                continue
            try:
                wait_ready(server)
                for concurrency in CONCURRENCY:
                    point = measure(server, concurrency, args.elements, args.seconds)
                    print(json.dumps(point), flush=True)
                    points.append(point)
            except Exception as exc:
                print(f"{name}: {type(exc).__name__}: {exc}; skipped", flush=True)
            finally:
                server.stop()
    ours = {p["concurrency"]: p for p in points if p["server"] == "lambdaserve"}
    print(f"{'server':<12}{'c':>3}{'resp/s':>10}{'first p50':>11}{'final p50':>11}{'ratio':>8}")
    for p in points:
        mine = ours.get(p["concurrency"])
        ratio = (
            f"{mine['responses_per_s'] / p['responses_per_s']:.2f}x"
            if mine and p["server"] != "lambdaserve"
            else ""
        )
        print(
            f"{p['server']:<12}{p['concurrency']:>3}{p['responses_per_s']:>10.0f}"
            f"{p['first_p50_ms']:>11.2f}{p['final_p50_ms']:>11.2f}{ratio:>8}"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"decoupled-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(points, indent=2))
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
