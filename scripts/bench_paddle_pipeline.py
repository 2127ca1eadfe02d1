"""A Paddle Serving pipeline (tests/fixtures/paddle_pipeline: pre -> Paddle model -> post, a
model-less Op, a fan-in Op) through lambdaserve, against the same Ops called by hand: the
per-Op overhead of the executor and of the Lambda warm path, one run.

1. floor: each Op's preprocess / process (its local model, OpenVINO) / postprocess called
   directly, in the DAG's order, then the response packed, as a hand-written loop would;
2. the executor (paddle_dag) running the same loaded Ops; overhead per Op = (2 - 1) / 3;
3. the infer Lambda's warm path (API Gateway v2 events, in-process, moto) on Paddle's route
   ``POST /mlp_pipeline/prediction``: HTTP codec, resolution, stats included.

The fixture's config.yml with its op timeout (each try on its own thread, as Paddle's
func_timeout) and without it; auto-batching off (a lone request would wait for company).

    python scripts/bench_paddle_pipeline.py [--requests 3000]

Writes bench/results/paddle-pipeline-<time>.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_infer import per_call_us, warm_infer_function

from lambdaserve.config.model_config import build
from lambdaserve.runtimes.base import LoadOptions
from lambdaserve.runtimes.paddle_serving.ops import PipelineRequest
from lambdaserve.runtimes.paddle_serving.pipeline import SIGNATURE, PaddlePipelineRuntime

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
RESULTS = ROOT / "bench" / "results"
NAME = "mlp_pipeline"
ROWS = "0.1,0.2,0.3,0.4;1,2,3,4"
REQUEST = PipelineRequest(["x", "scale"], [ROWS, "2"])
OPS = 3


def version_dir(root: Path, timeout_ms: int) -> Path:
    target = root / NAME / "1"
    shutil.copytree(FIXTURES / "paddle_pipeline", target)
    for suffix in ("pdmodel", "pdiparams"):
        source = FIXTURES / "peer_models" / "paddle_mlp" / f"model.{suffix}"
        shutil.copy(source, target / "mlp_model" / f"inference.{suffix}")
    config = (target / "config.yml").read_text()
    for batching in ("    batch_size: 4\n", "    auto_batching_timeout: 10\n"):
        config = config.replace(batching, "")
    config = config.replace("    timeout: 1000\n", f"    timeout: {timeout_ms}\n")
    (target / "config.yml").write_text(config)
    return target


def by_hand(model: Any) -> Any:
    """The Ops the executor runs, called directly in the DAG's order."""
    runners = {r.op.name: r.op for r in model._executor.runners}
    mlp, scale, join = runners["mlp"], runners["scale"], runners["join"]
    response_op = model._executor._exit

    def call() -> Any:
        request = {"x": ROWS, "scale": "2"}
        feed, _, _, _ = mlp.preprocess({"@DAGExecutor": request}, 0, 0)
        fetched, _, _ = mlp.process([feed], 0)
        mlp_out, _, _ = mlp.postprocess({"@DAGExecutor": request}, fetched, 0, 0)
        scale_in, _, _, _ = scale.preprocess({"@DAGExecutor": request}, 0, 0)
        scale_out, _, _ = scale.postprocess({"@DAGExecutor": request}, scale_in, 0, 0)
        joined, _, _, _ = join.preprocess({"mlp": mlp_out, "scale": scale_out}, 0, 0)
        return response_op.pack_response_package({"join": joined})

    return call


def in_process_us(directory: Path, count: int) -> dict[str, float]:
    runtime = PaddlePipelineRuntime()
    model = runtime.load(
        directory / "web_service.py",
        build({}, NAME),
        SIGNATURE,
        LoadOptions(python_models=True),
    )
    try:
        direct = by_hand(model)
        assert direct().value[:2] == model.call(REQUEST).value[:2]
        return {
            "floor_us": statistics.median(per_call_us(direct, count)),
            "executor_us": statistics.median(per_call_us(lambda: model.call(REQUEST), count)),
        }
    finally:
        model.close()


def lambda_warm_path_us(directory: Path, count: int) -> float:
    from moto import mock_aws

    from lambdaserve.local.http_api_event import http_api_event

    files = {
        f"models/{NAME}/1/{path.relative_to(directory).as_posix()}": path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }
    sink = open(os.devnull, "w", buffering=1)  # noqa: SIM115
    with tempfile.TemporaryDirectory() as work, mock_aws(), sink, contextlib.redirect_stdout(sink):
        handler = warm_infer_function(files, [NAME], work)
        body = json.dumps({"key": REQUEST.key, "value": REQUEST.value}).encode()
        event = http_api_event("POST", f"/{NAME}/prediction", body)
        assert json.loads(handler(event)["body"])["err_no"] == 0
        return statistics.median(per_call_us(lambda: handler(event), count))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    args = parser.parse_args()
    results: dict[str, Any] = {"requests": args.requests, "ops": OPS}
    with tempfile.TemporaryDirectory() as root:
        for label, timeout_ms in (("with op timeout", 1000), ("without op timeout", -1)):
            directory = version_dir(Path(root) / label.replace(" ", "_"), timeout_ms)
            point = in_process_us(directory, args.requests)
            point["lambda_us"] = lambda_warm_path_us(directory, args.requests)
            point["executor_per_op_us"] = (point["executor_us"] - point["floor_us"]) / OPS
            point["lambda_per_op_us"] = (point["lambda_us"] - point["floor_us"]) / OPS
            results[label] = point
    print(f"{'config':<22}{'floor us':>10}{'executor':>10}{'per Op':>8}{'Lambda':>9}{'per Op':>8}")
    for label in ("with op timeout", "without op timeout"):
        p = results[label]
        print(
            f"{label:<22}{p['floor_us']:>10.1f}{p['executor_us']:>10.1f}"
            f"{p['executor_per_op_us']:>8.1f}{p['lambda_us']:>9.1f}{p['lambda_per_op_us']:>8.1f}"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"paddle-pipeline-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
