"""The same TorchServe archive on TorchServe 0.12 and on `lambdaserve serve`: a BaseHandler
subclass with an eager model, a helper module and model-config.yaml (the tests' `tiny.mar`,
built by torch-model-archiver), JSON rows to `/predictions/tiny`, c=1 and c=32, one run, this
machine: requests per second, p50/p99 and the servers' resident memory.

    python scripts/bench_torchserve_handler.py [--seconds 10]

Writes bench/results/torchserve-handler-<time>.json; `make bench-peers` runs it last.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_batching import serve_environment, start_stack
from bench_peers import (
    RESULTS,
    Call,
    Ours,
    Running,
    _spawn,
    _venv,
    run_server,
)

from lambdaserve.local.emulator import free_port

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tests' archive builder: the same .mar the tests serve
from tests.torchserve_archives import archive, expected  # noqa: E402

JSON_HEADERS = {"content-type": "application/json"}
ROW = [0.5, -1.0, 2.0, 0.25]


def answer(raw: bytes) -> np.ndarray:
    return np.asarray(json.loads(raw)["probabilities"], np.float32)


def start_torchserve(work: Path, mar: Path, workers: int) -> Running:
    venv = _venv(
        "torchserve",
        ["torchserve==0.12.0", "torch-model-archiver==0.12.0", "pyyaml", "torch==2.13.0", "numpy"],
    )
    home = work / "torchserve"
    store = home / "model-store"
    store.mkdir(parents=True)
    (home / "tmp").mkdir()
    (store / mar.name).write_bytes(mar.read_bytes())
    inference, management, metrics = free_port(), free_port(), free_port()
    (home / "config.properties").write_text(
        "\n".join(
            [
                f"inference_address=http://127.0.0.1:{inference}",
                f"management_address=http://127.0.0.1:{management}",
                f"metrics_address=http://127.0.0.1:{metrics}",
                "disable_system_metrics=true",
                "async_logging=true",
                f"default_workers_per_model={workers}",
                f"model_store={store}",
                f"load_models={mar.name}",
                f"vmargs=-Xmx1g -Djava.io.tmpdir={home / 'tmp'}",
            ]
        )
        + "\n"
    )
    env = {
        **os.environ,
        "TMPDIR": str(home / "tmp"),
        "LOG_LOCATION": str(home / "logs"),
        "METRICS_LOCATION": str(home / "logs"),
        "TS_DISABLE_TOKEN_AUTHORIZATION": "true",
        "OMP_NUM_THREADS": "1",
        "PATH": f"{venv / 'bin'}:{os.environ['PATH']}",
    }
    process = _spawn(
        [
            str(venv / "bin" / "torchserve"),
            "--start",
            "--foreground",
            "--ncs",
            "--disable-token-auth",
            f"--ts-config={home / 'config.properties'}",
            f"--model-store={store}",
        ],
        env,
        home / "torchserve.out",
    )
    body = json.dumps({"values": ROW}).encode()
    return Running(
        "torchserve",
        process,
        inference,
        "/predictions/tiny",
        {"json": Call(body, JSON_HEADERS)},
        answer,
        extra={"workers": workers},
    )


class OursWithArchive(Ours):
    """`lambdaserve serve` with the archive uploaded as models/tiny.mar."""

    def __init__(self, mar: Path) -> None:
        self._stack, self._endpoint = start_stack()
        self._mar = mar

    def start_archive(self, work: Path) -> Running:
        import boto3

        s3 = boto3.client(
            "s3",
            endpoint_url=self._endpoint,
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
        )
        s3.put_object(
            Bucket="lambdaserve-models", Key="models/tiny.mar", Body=self._mar.read_bytes()
        )
        time.sleep(5)  # the event pump unpacks and validates it
        port = free_port()
        env = serve_environment(
            self._endpoint,
            str(work / "ours"),
            LAMBDASERVE_PYTHON_MODELS="1",
            OMP_NUM_THREADS="1",
        )
        process = _spawn(
            [sys.executable, "-m", "lambdaserve.cli", "serve", "--port", str(port),
             "--grpc-port", "0"],
            env,
            work / "ours.out",
        )  # fmt: skip
        body = json.dumps({"values": ROW}).encode()
        return Running(
            "lambdaserve", process, port, "/predictions/tiny", {"json": Call(body, JSON_HEADERS)},
            answer,
        )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=10)
    args = parser.parse_args()
    import bench_peers

    bench_peers.CONCURRENCY = (1, 32)
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        mar = archive(work, "tiny", "1.0")
        want = np.asarray(expected(work, [ROW])[0]["probabilities"], np.float32)
        points = run_server(lambda: start_torchserve(work, mar, 2), want, args.seconds)
        ours = OursWithArchive(mar)
        try:
            points += run_server(lambda: ours.start_archive(work), want, args.seconds)
        finally:
            ours.close()
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"torchserve-handler-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(points, indent=2))
    for point in points:
        print(
            f"{point['server']:12} c={point['concurrency']:<3} "
            f"{float(point['req_s']):8.0f} req/s  p50 {float(point['p50_ms']):6.2f} ms  "
            f"p99 {float(point['p99_ms']):6.2f} ms  rss {point['rss_mb']} MB"
        )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
