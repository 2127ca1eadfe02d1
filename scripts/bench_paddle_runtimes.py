"""Paddle Inference and OpenVINO on the same Paddle model, one run, this machine.

The uci_housing shape (13 floats -> fully connected -> 1), built by paddle itself
(tests/paddle_models.py): the Paddle 2 program (``paddle.nn.Linear``: ``matmul_v2``, which
OpenVINO reads) served by OpenVINO (the default) and by Paddle Inference (what
``backend: "paddle_inference"`` chooses), and the Paddle 1.x ``__model__`` layout
(uci_housing_model: ``mul``, one file per parameter), which only Paddle Inference serves.
Each loaded as lambdaserve loads it (``runtime.load``, CPU, ``--threads`` op threads), its
answer checked against Paddle's own predictor first.

First each runtime's import, timed (what a cold start pays on top of a load). Per row:
load = the median of ``--loads`` loads after a first one; p50 = the median of
``--runs`` calls at batch 1 (after 200 warm-up calls), with the CPU a call cost (this
process's CPU time over the calls / calls: both runtimes run in this process).

    python scripts/bench_paddle_runtimes.py [--runs 3000] [--loads 5] [--threads 1] [--json]
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from lambdaserve.config.model_config import ModelConfig
from lambdaserve.runtimes.base import LoadedModel, LoadOptions
from lambdaserve.runtimes.registry import runtime_named

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tests' Paddle builder: the same models the tests serve
from tests.paddle_models import INPUT, build_paddle_models  # noqa: E402

# (row label, layout, model file, runtime)
CASES = (
    ("Paddle 2 program (matmul_v2)", "linear_pdmodel", "model.pdmodel", "openvino"),
    ("Paddle 2 program (matmul_v2)", "linear_pdmodel", "model.pdmodel", "paddle_inference"),
    ("Paddle 1.x __model__ (mul)", "uci_housing", "__model__", "paddle_inference"),
)


@dataclass(frozen=True)
class Row:
    model: str
    runtime: str
    load_ms: float
    p50_us: float
    cpu_us_per_call: float


def measure(
    path: Path, runtime_name: str, options: LoadOptions, loads_n: int
) -> tuple[LoadedModel, float]:
    """The model loaded, and the median of the loads after a first (untimed) one."""
    runtime = runtime_named(runtime_name)
    config = ModelConfig(name="uci")
    signature = runtime.inspect(path, config)
    model = runtime.load(path, config, signature, options)
    loads = []
    for _ in range(loads_n):
        started = time.perf_counter()
        model = runtime.load(path, config, signature, options)
        loads.append((time.perf_counter() - started) * 1000)
    assert model is not None
    return model, statistics.median(loads)


def imported(module: str) -> float:
    """Milliseconds to import ``module`` in this process (its first import)."""
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        importlib.import_module(module)
    return (time.perf_counter() - started) * 1000


def latency(model: LoadedModel, output: str, runs: int) -> tuple[float, float]:
    row = {"x": INPUT[:1].copy()}
    for _ in range(200):
        model.run(row, [output])
    times = []
    cpu = time.process_time()
    for _ in range(runs):
        started = time.perf_counter()
        model.run(row, [output])
        times.append(time.perf_counter() - started)
    cpu_per_call = (time.process_time() - cpu) / runs
    return statistics.median(times) * 1e6, cpu_per_call * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3000)
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    options = LoadOptions(device="cpu", intra_op_threads=args.threads)
    imports = {name: round(imported(name)) for name in ("openvino", "paddle.inference")}
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        expected = build_paddle_models(root)
        for label, layout, model_file, runtime in CASES:
            output, answer = expected[layout]
            model, load_ms = measure(root / layout / model_file, runtime, options, args.loads)
            got = model.run({"x": INPUT}, [output])[output]
            np.testing.assert_allclose(got, answer, rtol=1e-5, atol=1e-5)  # Paddle's numbers
            p50, cpu = latency(model, output, args.runs)
            rows.append(Row(label, runtime, round(load_ms, 1), round(p50, 1), round(cpu, 1)))
    if args.json:
        print(json.dumps({"imports_ms": imports, "rows": [asdict(r) for r in rows]}, indent=2))
        return
    base = rows[0].p50_us
    print(f"imports: {imports}")
    print("| model | runtime | load (warm process) | p50 @1 | CPU per call |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r.model} | {r.runtime} | {r.load_ms} ms | {r.p50_us} µs "
            f"({r.p50_us / base:.1f}x) | {r.cpu_us_per_call} µs |"
        )


if __name__ == "__main__":
    main()
