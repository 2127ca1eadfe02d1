"""How long and how much memory publish-time validation takes for large versions.

    .venv/bin/python scripts/bench_validate.py [--sizes-mb 256 1024 2048]

For each size: a MatMul model whose weight lives in external data (ONNX files themselves
stop at 2 GiB) is uploaded to the moto server (its own memory, in this process); a fresh
process then runs the manage function's own VersionValidator (download, sha256,
onnxruntime session) and reports its seconds and peak RSS, and another fresh process runs
the raw floor of the same steps (boto3 download_file, hashlib, InferenceSession). These
numbers size the manage function in template.yaml.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

ENDPOINT = "AWS_ENDPOINT_URL"


def _model(directory: Path, megabytes: int) -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    columns = 1024
    rows = megabytes * 1024 * 1024 // (4 * columns)
    (directory / "w.bin").write_bytes(np.ones((rows, columns), np.float32).tobytes())
    weight = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[rows, columns])
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "w.bin"), ("offset", "0"), ("length", str(rows * columns * 4))):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", rows])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", columns])],
        initializer=[weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(directory / "model.onnx"))


def _validate(work_dir: str, queue: Any) -> None:
    from lambdaserve.config.model_config import ModelConfig
    from lambdaserve.settings import Settings
    from lambdaserve.wiring.manage import build_manage_services

    settings = Settings(work_dir=work_dir, endpoint_url=os.environ[ENDPOINT])
    services = build_manage_services(settings)
    objects = services.repository.version_objects("big", 1)
    started = time.perf_counter()
    services.registrar._validator.validate(objects, ModelConfig(name="big"))
    queue.put((time.perf_counter() - started, _peak_rss_kb()))


def _peak_rss_kb() -> int:
    """This process's own high-water mark (ru_maxrss survives exec, so a spawned child would
    report its parent's: VmHWM belongs to the process's memory map)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _floor(work_dir: str, queue: Any) -> None:
    import boto3
    import onnxruntime as ort

    from lambdaserve.settings import Settings

    bucket = Settings().bucket
    s3 = boto3.client("s3", endpoint_url=os.environ[ENDPOINT], region_name="us-east-1")
    target = Path(work_dir) / "floor"
    target.mkdir(parents=True)
    started = time.perf_counter()
    for name in ("model.onnx", "w.bin"):
        s3.download_file(bucket, f"models/big/1/{name}", str(target / name))
        digest = hashlib.sha256()
        with (target / name).open("rb") as handle:
            while chunk := handle.read(1024 * 1024):
                digest.update(chunk)
    ort.InferenceSession(str(target / "model.onnx"), providers=["CPUExecutionProvider"])
    queue.put((time.perf_counter() - started, _peak_rss_kb()))


def _in_child(target: Any, work_dir: str) -> tuple[float, int]:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=target, args=(work_dir, queue))
    process.start()
    process.join()
    if process.exitcode != 0:
        raise SystemExit(f"{target.__name__} failed (exit {process.exitcode})")
    seconds, peak_kb = queue.get()
    return seconds, peak_kb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[256, 1024, 2048])
    args = parser.parse_args()
    from lambdaserve.local.emulator import Emulator, free_port
    from lambdaserve.local.resources import ensure_resources
    from lambdaserve.processes.logs import quiet_third_parties
    from lambdaserve.settings import Settings
    from lambdaserve.wiring.aws import AwsClients

    quiet_third_parties()
    emulator = Emulator("127.0.0.1", free_port()).start()
    os.environ[ENDPOINT] = emulator.endpoint
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(key, "test")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    settings = Settings(endpoint_url=emulator.endpoint)
    clients = AwsClients(settings)
    ensure_resources(clients, settings)
    try:
        for megabytes in args.sizes_mb:
            with tempfile.TemporaryDirectory() as scratch:
                root = Path(scratch)
                _model(root, megabytes)
                for name in ("model.onnx", "w.bin"):
                    clients.s3.upload_file(
                        str(root / name), settings.bucket, f"models/big/1/{name}"
                    )
                (root / "w.bin").unlink()
                seconds, peak = _in_child(_validate, str(root / "validate"))
                floor, floor_peak = _in_child(_floor, str(root / "raw"))
                result = {
                    "size_mb": megabytes,
                    "validate_s": round(seconds, 2),
                    "raw_floor_s": round(floor, 2),
                    "ratio": round(seconds / floor, 2),
                    "validate_peak_rss_mb": peak // 1024,
                    "raw_floor_peak_rss_mb": floor_peak // 1024,
                }
                print(json.dumps(result), flush=True)
                clients.s3.delete_objects(
                    Bucket=settings.bucket,
                    Delete={
                        "Objects": [{"Key": f"models/big/1/{n}"} for n in ("model.onnx", "w.bin")]
                    },
                )
    finally:
        emulator.stop()


if __name__ == "__main__":
    main()
