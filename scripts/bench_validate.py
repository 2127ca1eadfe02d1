"""How long and how much memory publish-time validation takes for large versions.

    .venv/bin/python scripts/bench_validate.py [--sizes-mb 256 1024 2048]

Each size runs in a fresh process against in-process moto: a MatMul model whose weight
lives in external data (ONNX files themselves stop at 2 GiB), validated by the manage
function's own VersionValidator (download, sha256, onnxruntime session). Reports seconds
and the process's peak RSS, beside the raw floor of the same steps (download_file, hashlib,
InferenceSession) — the numbers that size the manage function (template.yaml).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import resource
import tempfile
import time
from pathlib import Path


def _model(directory: Path, megabytes: int) -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    columns = 1024
    rows = megabytes * 1024 * 1024 // (4 * columns)
    (directory / "w.bin").write_bytes(np.ones((rows, columns), np.float32).tobytes())
    weight = helper.make_tensor("W", TensorProto.FLOAT, [rows, columns], vals=[])
    weight.ClearField("float_data")
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


def _run(megabytes: int, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    from moto import mock_aws

    from lambdaserve.aws import AwsClients
    from lambdaserve.local.resources import ensure_resources
    from lambdaserve.modelconfig import ModelConfig
    from lambdaserve.services import build_manage_services
    from lambdaserve.settings import Settings

    with tempfile.TemporaryDirectory() as scratch, mock_aws():
        root = Path(scratch)
        _model(root, megabytes)
        settings = Settings(work_dir=str(root / "work"))
        clients = AwsClients(settings)
        ensure_resources(clients, settings)
        for name in ("model.onnx", "w.bin"):
            clients.s3.upload_file(str(root / name), settings.bucket, f"models/big/1/{name}")
        (root / "w.bin").unlink()
        services = build_manage_services(settings, clients)
        objects = services.repository.version_objects("big", 1)
        baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started = time.perf_counter()
        validated = services.registrar._validator.validate(objects, ModelConfig(name="big"))
        seconds = time.perf_counter() - started
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

        import onnxruntime as ort

        floor = root / "floor"
        floor.mkdir()
        started = time.perf_counter()
        for name in ("model.onnx", "w.bin"):
            clients.s3.download_file(settings.bucket, f"models/big/1/{name}", str(floor / name))
            hashlib.sha256((floor / name).read_bytes()).hexdigest()
        ort.InferenceSession(str(floor / "model.onnx"), providers=["CPUExecutionProvider"])
        raw = time.perf_counter() - started
        queue.put(
            {
                "size_mb": megabytes,
                "validate_s": round(seconds, 2),
                "raw_floor_s": round(raw, 2),
                "ratio": round(seconds / raw, 2),
                "peak_rss_mb_during_validate": round((peak - baseline) / 1024),
                "process_peak_rss_mb": round(peak / 1024),
                "signature": validated.signature.to_json()["inputs"][0]["shape"],
            }
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[256, 1024, 2048])
    args = parser.parse_args()
    context = multiprocessing.get_context("spawn")
    for megabytes in args.sizes_mb:
        queue = context.Queue()
        process = context.Process(target=_run, args=(megabytes, queue))
        process.start()
        print(json.dumps(queue.get()), flush=True)
        process.join()


if __name__ == "__main__":
    main()
