"""The same TorchServe archives on TorchServe 0.12 and on `lambdaserve serve`, c=1 and c=32,
one run, this machine: requests per second, p50/p99, CPU seconds per 1,000 requests and
resident memory, both of each server's whole process tree (TorchServe's JVM and its Python
workers; `serve` and its model-code workers).

- tiny: a BaseHandler subclass with an eager model, a helper module and model-config.yaml
  (the tests' `tiny.mar`), JSON rows to `/predictions/tiny`;
- classifier: TorchServe's built-in `image_classifier` on an eager CNN with
  index_to_name.json (the tests' `classifier.mar`), a JPEG body as `curl -T` sends it;
- classifier-batched: the same with model-config.yaml `batchSize: 4`, `maxBatchDelay: 5` and
  `minWorkers`/`maxWorkers` one per core (TorchServe's default count, written out).

    python scripts/bench_torchserve_handler.py [--seconds 10] [--workload tiny ...]
        [--workers-mode in-process,workers] [--concurrency 1,32]

`--workers-mode` runs ours once per mode, side by side in one run: the handler in the
serving process (`in-process`: LAMBDASERVE_CODE_WORKERS=0), or in its worker processes
(`workers`, the default).

Writes bench/results/torchserve-handler-<time>.json; `make bench-peers` runs it last.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
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
from tests.torchserve_archives import (  # noqa: E402
    archive,
    builtin_archive,
    expected,
    jpeg,
    torchserve_answers,
    torchserve_handler,
)

JSON_HEADERS = {"content-type": "application/json"}
ROW = [0.5, -1.0, 2.0, 0.25]
PEER_PACKAGES = [
    "torchserve==0.12.0", "torch-model-archiver==0.12.0", "pyyaml", "torch==2.13.0", "numpy",
    "torchvision==0.28.0", "captum>=0.8", "pillow",
]  # fmt: skip
# PyPI's torchvision is a CUDA build: beside the CPU torch its import fails on two operator
# schemas (lambdaserve's runtimes/torchserve/torchvision_ops.py explains); TorchServe's worker
# gets them declared at interpreter start, as lambdaserve declares them when the import fails.
TORCHVISION_SCHEMAS_PTH = (
    "import torch; _tv = torch.library.Library('torchvision', 'DEF'); "
    "_tv.define('nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor'); "
    "_tv.define('qnms(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor'); "
    "torch._torchvision_schemas_for_the_benchmark = _tv\n"
)


@dataclass(frozen=True)
class Workload:
    """One archive, one request for it, and how to read and check its answer."""

    mar: Path
    call: Call
    answer: Callable[[bytes], np.ndarray]
    want: np.ndarray

    @property
    def protocol(self) -> str:
        return "json" if self.call.headers is JSON_HEADERS else "jpeg"

    @property
    def model(self) -> str:
        return self.mar.stem


def _probabilities(raw: bytes) -> np.ndarray:
    return np.asarray(json.loads(raw)["probabilities"], np.float32)


def _top5(raw: bytes) -> np.ndarray:
    classes = json.loads(raw)
    return np.asarray([classes[name] for name in sorted(classes)], np.float32)


def workload(name: str, work: Path) -> Workload:
    where = work / name
    where.mkdir()
    if name == "tiny":
        mar = archive(where, "tiny", "1.0")  # writes the state dict `expected` reads
        want = np.asarray(expected(where, [ROW])[0]["probabilities"], np.float32)
        body = json.dumps({"values": ROW}).encode()
        return Workload(mar, Call(body, JSON_HEADERS), _probabilities, want)
    config = None
    if name == "classifier-batched":
        # workers as TorchServe's default gives it (one per core): with model code in
        # workers, lambdaserve's batcher hands each its own batch
        cores = len(os.sched_getaffinity(0))
        config = where / "model-config.yaml"
        config.write_text(
            f"batchSize: 4\nmaxBatchDelay: 5\nminWorkers: {cores}\nmaxWorkers: {cores}\n"
        )
    mar = builtin_archive(where, "classifier", "image_classifier", "1.0", config)
    image = jpeg(seed=3)
    [want] = torchserve_answers(mar, [image], where)
    call = Call(image, {"content-type": "image/jpeg"})
    return Workload(mar, call, _top5, _top5(json.dumps(want).encode()))


def torchserve_venv() -> Path:
    venv = _venv("torchserve", PEER_PACKAGES)
    [site] = (venv / "lib").glob("python3*/site-packages")
    (site / "torchvision_schemas.pth").write_text(TORCHVISION_SCHEMAS_PTH)
    return venv


def start_torchserve(work: Path, job: Workload, workers: int) -> Running:
    venv = torchserve_venv()
    mar = job.mar
    home = work / f"torchserve-{job.mar.parent.parent.name}"
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
    return Running(
        "torchserve",
        process,
        inference,
        f"/predictions/{job.model}",
        {job.protocol: job.call},
        job.answer,
        extra={"workers": workers},
    )


class OursWithArchive(Ours):
    """`lambdaserve serve` with the archive uploaded as models/<name>.mar."""

    def __init__(self, job: Workload, workers: int, mode: str = "in-process") -> None:
        self._stack, self._endpoint = start_stack()
        self._job = job
        self.workers = workers
        self.mode = mode
        self._published = False

    def start_archive(self, work: Path) -> Running:
        import boto3

        s3 = boto3.client(
            "s3",
            endpoint_url=self._endpoint,
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
        )
        job = self._job
        if not self._published:
            s3.put_object(
                Bucket="lambdaserve-models", Key=f"models/{job.mar.name}", Body=job.mar.read_bytes()
            )
            time.sleep(5)  # the event pump unpacks and validates it
            self._published = True
        port = free_port()
        env = serve_environment(
            self._endpoint,
            str(work / f"ours-{self.mode}"),
            LAMBDASERVE_PYTHON_MODELS="1",
            LAMBDASERVE_CODE_WORKERS="1" if self.mode == "workers" else "0",
            OMP_NUM_THREADS="1",
        )
        process = _spawn(
            [sys.executable, "-m", "lambdaserve.cli", "serve", "--port", str(port),
             "--grpc-port", "0", "--workers", str(self.workers)],
            env,
            work / f"ours-{job.mar.parent.parent.name}-{self.mode}.out",
        )  # fmt: skip
        return Running(
            f"lambdaserve ({self.mode})", process, port, f"/predictions/{job.model}",
            {job.protocol: job.call}, job.answer,
            extra={"workers": self.workers, "code": self.mode},
        )  # fmt: skip


WORKLOADS = ("tiny", "classifier", "classifier-batched")
MODES = ("in-process", "workers")


def handler_floor(job: Workload, work: Path, calls: int = 300) -> dict[str, object]:
    """The handler alone, called in this process by TorchServe's own code: its time a
    request bounds any server's requests a second on these cores."""
    import torch

    torch.set_num_threads(1)  # as the servers run (OMP_NUM_THREADS=1): one core a worker
    floor = work / f"floor-{job.mar.parent.parent.name}"
    floor.mkdir()
    with torchserve_handler(job.mar, floor) as handle:
        for _ in range(20):
            handle([job.call.body])
        started = time.perf_counter()
        for _ in range(calls):
            handle([job.call.body])
        per_call_ms = (time.perf_counter() - started) / calls * 1000
    cores = len(os.sched_getaffinity(0))
    return {
        "server": "handler alone", "protocol": job.protocol, "concurrency": 0,
        "req_s": round(cores * 1000 / per_call_ms, 1), "p50_ms": per_call_ms, "p99_ms": 0,
        "rss_mb": 0, "cores": cores,
    }  # fmt: skip


def compare(job: Workload, work: Path, args: argparse.Namespace) -> list[dict[str, object]]:
    """TorchServe (its default workers: one per core) then ours in each mode, one archive."""
    points = [handler_floor(job, work)]
    cores = len(os.sched_getaffinity(0))
    points += run_server(lambda: start_torchserve(work, job, cores), job.want, args.seconds)
    ours = OursWithArchive(job, args.ours_workers)
    try:
        for mode in args.workers_mode:
            ours.mode = mode
            points += run_server(lambda: ours.start_archive(work), job.want, args.seconds)
    finally:
        ours.close()
    return points


def _modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise argparse.ArgumentTypeError(f"modes are {', '.join(MODES)}; got {text!r}")
    return modes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument(
        "--workload", nargs="+", default=list(WORKLOADS), choices=WORKLOADS,
        help="which archives (default: all)",
    )  # fmt: skip
    parser.add_argument(
        "--ours-workers", type=int, default=2,
        help="`serve --workers` (default 2: TorchServe runs 2 workers, one per core here)",
    )  # fmt: skip
    parser.add_argument(
        "--workers-mode", type=_modes, default=["workers"],
        help="where ours runs the handler, comma-separated: in-process, workers "
        "(the default, as shipped)",
    )  # fmt: skip
    parser.add_argument("--concurrency", default="1,32", help="comma-separated (default 1,32)")
    args = parser.parse_args()
    import bench_peers

    bench_peers.CONCURRENCY = tuple(int(c) for c in args.concurrency.split(","))
    points: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        for name in args.workload:
            points += [{"workload": name, **p} for p in compare(workload(name, work), work, args)]
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"torchserve-handler-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(points, indent=2))
    for point in points:
        print(
            f"{point['workload']:19} {point['server']:24} c={point['concurrency']:<3} "
            f"{float(point['req_s']):8.0f} req/s  p50 {float(point['p50_ms']):6.2f} ms  "
            f"p99 {float(point['p99_ms']):6.2f} ms  "
            f"cpu {float(point.get('server_cpu_s_per_1k', 0)):6.3f} s/1k  "
            f"rss {point['rss_mb']} MB"
        )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
