"""The response cache, in one run, side by side (issue 33):

1. Warm latency of one v2 request through the infer function's direct path (bytes in, bytes
   out: ``v2_infer``), c=1: computed (the same model without ``response_cache``) vs a hit in
   the local tier vs a hit in Redis (a real ``redis-server`` on this machine), for the demo
   MLP and a ~100 MB MatMul model this script builds.
2. The same at c=32 against a real ``lambdaserve serve`` (HTTP, dynamic batcher), one
   process with the local tier, one with Redis only.
3. A cold infer-function instance (a fresh interpreter, an empty work dir) answering its
   first request from Redis vs the same instance cold-loading the ~100 MB model (download
   from the emulator over HTTP + session + run). Goal: >= 50x faster first answer.

    python scripts/bench_cache.py [--requests 400] [--big-mb 100] [--json PATH]

Triton's own response cache is not run here: tritonserver is not installable on this
machine (no container runtime, no wheel), so there is no anchor run beside these numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import redis
from bench_cold import big_model_bytes, v2_body

from lambdaserve.apps.v2_calls import v2_infer
from lambdaserve.local.demo import demo_mlp_bytes
from lambdaserve.local.emulator import Emulator, free_port
from lambdaserve.local.http_api_event import http_api_event
from lambdaserve.local.resources import ensure_resources
from lambdaserve.serving.data_plane import InferenceDataPlane
from lambdaserve.settings import get_settings
from lambdaserve.wiring.aws import AwsClients
from lambdaserve.wiring.inference import build_model_server
from lambdaserve.wiring.manage import build_manage_services

CACHED = b"response_cache { enable: true }"
FIRST_REQUEST = """
import json, sys, time
from pathlib import Path
started = time.perf_counter()
from lambdaserve.handlers import infer
imported = time.perf_counter()
response = infer.api_handler(json.loads(Path(sys.argv[1]).read_text()), None)
done = time.perf_counter()
assert response["statusCode"] == 200, response["body"][:500]
print("##RESULT " + json.dumps({"import_s": imported - started, "first_s": done - imported,
      "loaded": current().server().residency.loaded_versions()}))
"""


@contextmanager
def redis_server() -> Iterator[int]:
    """A real redis-server (Debian's package) on a free port, no persistence."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed (apt-get install -y redis-server)")
    port = free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: _pings(port), 30)
        yield port
    finally:
        process.kill()
        process.wait(timeout=30)


def _pings(port: int) -> bool:
    try:
        return bool(redis.Redis(port=port, socket_timeout=2).ping())
    except redis.RedisError:
        return False


def wait_until(probe: Callable[[], bool], timeout_s: float, interval_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        if time.monotonic() > deadline:
            raise RuntimeError(f"not ready within {timeout_s} s")
        time.sleep(interval_s)


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
        "n": len(ordered),
    }


def timed(call: Callable[[], object], count: int) -> list[float]:
    call()  # the first: loads the model, or fills the cache
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return samples


def publish(models: dict[str, tuple[bytes, bytes]]) -> None:
    settings = get_settings()
    clients = AwsClients(settings)
    ensure_resources(clients, settings)
    registrar = build_manage_services(settings, clients).registrar
    for model, (config, data) in models.items():
        if config:
            clients.s3.put_object(
                Bucket=settings.bucket, Key=f"models/{model}/config.pbtxt", Body=config
            )
        clients.s3.put_object(Bucket=settings.bucket, Key=f"models/{model}/1/model.onnx", Body=data)
        registrar.reconcile_model(model)


def warm_c1(bodies: dict[str, bytes], redis_port: int, count: int, work: Path) -> dict[str, Any]:
    settings = replace(get_settings(), work_dir=str(work / "warm"))
    local = build_model_server(settings)
    shared = build_model_server(
        replace(settings, response_cache_bytes=0, redis_host="127.0.0.1", redis_port=redis_port)
    )
    report: dict[str, Any] = {}
    for family, body in bodies.items():
        runs = {
            "computed": (local, f"{family}-plain"),
            "local hit": (local, family),
            "redis hit": (shared, family),
        }
        for label, (server, model) in runs.items():
            plane = InferenceDataPlane(lambda server=server: server)

            def call(plane: Any = plane, model: str = model, body: bytes = body) -> object:
                return v2_infer(plane, model, None, body, None)

            samples = timed(call, count if family == "mlp" else max(20, count // 10))
            report[f"{family} {label}"] = percentiles(samples)
            print(f"c=1  {family:5} {label:10} {report[f'{family} {label}']}", flush=True)
    return report


def serve_process(port: int, *flags: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lambdaserve.cli",
            "serve",
            "--port",
            str(port),
            "--grpc-port",
            "0",
            *flags,
        ],
        env=dict(os.environ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def concurrent(url: str, model: str, body: bytes, total: int, clients: int) -> list[float]:
    samples: list[float] = []
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        first = await client.post(f"/v2/models/{model}/infer", content=body)
        assert first.status_code == 200, first.text
        queue: asyncio.Queue[int] = asyncio.Queue()
        for index in range(total):
            queue.put_nowait(index)

        async def worker() -> None:
            while not queue.empty():
                queue.get_nowait()
                started = time.perf_counter()
                answer = await client.post(f"/v2/models/{model}/infer", content=body)
                samples.append(time.perf_counter() - started)
                assert answer.status_code == 200, answer.text

        await asyncio.gather(*(worker() for _ in range(clients)))
    return samples


def warm_c32(bodies: dict[str, bytes], redis_port: int, total: int) -> dict[str, Any]:
    report: dict[str, Any] = {}
    local_port, redis_only_port = free_port(), free_port()
    servers = [
        serve_process(local_port, "--cache-config", "local,size=67108864"),
        serve_process(
            redis_only_port,
            "--cache-config",
            f"redis,host=127.0.0.1,port={redis_port}",
            "--cache-config",
            "local,size=0",
        ),
    ]
    try:
        for port in (local_port, redis_only_port):
            wait_until(lambda port=port: _live(port), 120, 0.2)
        for family, body in bodies.items():
            runs = {
                "computed": (local_port, f"{family}-plain"),
                "local hit": (local_port, family),
                "redis hit": (redis_only_port, family),
            }
            for label, (port, model) in runs.items():
                count = total if family == "mlp" else max(64, total // 8)
                samples = asyncio.run(
                    concurrent(f"http://127.0.0.1:{port}", model, body, count, 32)
                )
                report[f"{family} {label}"] = percentiles(samples)
                print(f"c=32 {family:5} {label:10} {report[f'{family} {label}']}", flush=True)
    finally:
        for server in servers:
            server.terminate()
            server.wait(timeout=60)
    return report


def _live(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/v2/health/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def cold(
    work: Path, body: bytes, redis_port: int, runs: int, extra: dict[str, str]
) -> dict[str, Any]:
    event = work / "big-event.json"
    report: dict[str, Any] = {}
    for label, model in (("cold load", "big-plain"), ("redis hit", "big")):
        path = f"/v2/models/{model}/infer"
        event.write_text(json.dumps(http_api_event("POST", path, body)))
        samples = []
        for run in range(runs + (1 if label == "redis hit" else 0)):
            env = {
                **os.environ,
                **extra,
                "LAMBDASERVE_WORK_DIR": str(work / f"cold-{label}-{run}"),
                "LAMBDASERVE_REDIS_HOST": "127.0.0.1",
                "LAMBDASERVE_REDIS_PORT": str(redis_port),
            }
            done = subprocess.run(
                [sys.executable, "-c", FIRST_REQUEST, str(event)],
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            lines = [line for line in done.stdout.splitlines() if line.startswith("##RESULT ")]
            if done.returncode or not lines:
                raise RuntimeError(done.stderr[-3000:])
            result = json.loads(lines[-1].removeprefix("##RESULT "))
            if label == "redis hit" and run == 0:
                continue  # the first instance computes and fills Redis
            assert (result["loaded"] == []) == (label == "redis hit"), result
            samples.append(result)
        report[label] = {
            "first_request_ms": statistics.median(s["first_s"] for s in samples) * 1000,
            "import_ms": statistics.median(s["import_s"] for s in samples) * 1000,
            "runs": len(samples),
        }
        print(f"cold {label:10} {report[label]}", flush=True)
    report["speedup"] = (
        report["cold load"]["first_request_ms"] / report["redis hit"]["first_request_ms"]
    )
    print(f"cold: first answer from Redis {report['speedup']:.0f}x faster (goal >= 50x)")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--big-mb", type=int, default=100)
    parser.add_argument("--cold-runs", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write every number here")
    args = parser.parse_args()
    logging.getLogger("moto").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="moto")
    with tempfile.TemporaryDirectory(prefix="bench-cache-") as tmp, redis_server() as redis_port:
        work = Path(tmp)
        emulator = Emulator("127.0.0.1", free_port()).start()
        os.environ.update(
            AWS_ENDPOINT_URL=emulator.endpoint,
            AWS_ACCESS_KEY_ID="test",
            AWS_SECRET_ACCESS_KEY="test",
            AWS_REGION="us-east-1",
            AWS_DEFAULT_REGION="us-east-1",
            POWERTOOLS_METRICS_DISABLED="true",
            POWERTOOLS_LOG_LEVEL="WARNING",
            LAMBDASERVE_WORK_DIR=str(work / "serve"),
            LAMBDASERVE_MAX_MODEL_BYTES=str(1024**3),
            LAMBDASERVE_RESPONSE_CACHE_MAX_ENTRY_BYTES=str(4 * 1024**2),
        )
        # as in Lambda, the cold instances' init (imports, AWS clients, the runtime's import)
        # runs before their first request is timed
        cold_env = {"AWS_LAMBDA_FUNCTION_NAME": "lambdaserve-bench"}
        get_settings.cache_clear()
        try:
            mlp = demo_mlp_bytes()
            big, width = big_model_bytes(args.big_mb)
            print(f"big model: {len(big) / 1e6:.0f} MB, MatMul of width {width}", flush=True)
            publish(
                {
                    "mlp": (CACHED, mlp),
                    "mlp-plain": (b"", mlp),
                    "big": (CACHED, big),
                    "big-plain": (b"", big),
                }
            )
            bodies = {"mlp": v2_body("INPUT__0", 4), "big": v2_body("x", width)}
            report = {
                "c1": warm_c1(bodies, redis_port, args.requests, work),
                "c32": warm_c32(bodies, redis_port, args.requests),
                "cold": cold(work, bodies["big"], redis_port, args.cold_runs, cold_env),
            }
        finally:
            emulator.stop()
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
