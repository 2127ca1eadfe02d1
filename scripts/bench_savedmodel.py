"""OpenVINO and TensorFlow on the same SavedModels, one run, this machine: the figures behind
which runtime serves a SavedModel by default (docs/from-tfserving.md, docs/benchmarks.md).

Three SavedModels: the MLP of tests/fixtures/peer_models/savedmodel_mlp (x f32 [-1,4] ->
Dense 8 -> Dense 3 -> softmax), a small Keras CNN built here by TensorFlow (32x32x3 ->
Conv 16 -> Conv 32 stride 2 -> global mean -> Dense 10), and a string lookup (a
StaticHashTable, which OpenVINO refuses: TensorFlow's row only); TF Serving's half_plus_two
(TF1) too, which OpenVINO refuses. Each loaded as lambdaserve loads it (``runtime.load``, CPU,
``--threads`` op threads), both answers checked against each other first.

First each runtime's import, timed in a fresh interpreter (what a cold start pays on top of a
load). Per row: load = the median of ``--loads`` loads after a first one; p50 = the median
of ``--runs`` calls at batch 1 and at batch 32 (after 100 warm-up calls), with the CPU a call
cost (this process's CPU time over the calls / calls: both runtimes run in this process).

    python scripts/bench_savedmodel.py [--runs 2000] [--loads 5] [--threads 1] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lambdaserve.config.model_config import ModelConfig
from lambdaserve.errors import ModelRejected
from lambdaserve.runtimes.base import LoadedModel, LoadOptions
from lambdaserve.runtimes.registry import runtime_named

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
RUNTIMES = ("openvino", "tensorflow")


@dataclass(frozen=True)
class Row:
    model: str
    runtime: str
    load_ms: float
    p50_us_1: float
    cpu_us_1: float
    p50_us_32: float
    cpu_us_32: float


def build(root: Path, threads: int) -> dict[str, tuple[Path, Callable[[int], dict[str, Any]], str]]:
    """The SavedModels: (saved_model.pb, inputs for a batch size, the output compared).
    TensorFlow's op threads are set first: they are the process's, fixed at its first op."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)

    class Lookup(tf.Module):
        def __init__(self) -> None:
            keys = tf.constant([f"w{i}" for i in range(1000)])
            init = tf.lookup.KeyValueTensorInitializer(keys, tf.range(1000, dtype=tf.int64))
            self.table = tf.lookup.StaticHashTable(init, -1)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def lookup(self, words: Any) -> Any:
            return {"ids": self.table.lookup(words)}

    lookup = Lookup()
    tf.saved_model.save(lookup, str(root / "lookup"), signatures={"serving_default": lookup.lookup})
    tf.keras.utils.set_random_seed(7)
    inputs = tf.keras.Input((32, 32, 3), name="image")
    x = tf.keras.layers.Conv2D(16, 3, padding="same", activation="relu")(inputs)
    x = tf.keras.layers.Conv2D(32, 3, strides=2, padding="same", activation="relu")(x)
    x = tf.keras.layers.GlobalAveragePooling2D()(x)
    cnn = tf.keras.Model(inputs, tf.keras.layers.Dense(10, name="logits")(x))
    spec = tf.TensorSpec([None, 32, 32, 3], tf.float32, name="image")
    serve = tf.function(lambda image: {"logits": cnn(image)}, input_signature=[spec])
    tf.saved_model.save(cnn, str(root / "cnn"), signatures={"serving_default": serve})
    rng = np.random.default_rng(3)
    return {
        "MLP 4-8-3": (
            FIXTURES / "peer_models" / "savedmodel_mlp" / "saved_model.pb",
            lambda n: {"x": rng.random((n, 4), dtype=np.float32)},
            "y",
        ),
        "Keras CNN 32x32x3": (
            root / "cnn" / "saved_model.pb",
            lambda n: {"image": rng.random((n, 32, 32, 3), dtype=np.float32)},
            "logits",
        ),
        "string lookup (StaticHashTable)": (
            root / "lookup" / "saved_model.pb",
            lambda n: {"words": np.array([f"w{i % 1200}".encode() for i in range(n)], object)},
            "ids",
        ),
        "TF Serving half_plus_two (TF1)": (
            FIXTURES / "half_plus_two" / "tf1" / "00000123" / "saved_model.pb",
            lambda n: {"x": rng.random((n, 1), dtype=np.float32)},
            "y",
        ),
    }


def import_ms(module: str) -> float:
    """Milliseconds to import ``module`` in a fresh interpreter (the median of three)."""
    code = (
        "import time; t = time.perf_counter(); import importlib; "
        f"importlib.import_module({module!r}); print((time.perf_counter() - t) * 1000)"
    )
    times = [
        float(
            subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, check=True
            ).stdout.split()[-1]
        )
        for _ in range(3)
    ]
    return statistics.median(times)


def loaded(path: Path, name: str, options: LoadOptions, loads: int) -> tuple[LoadedModel, float]:
    runtime = runtime_named(name)  # type: ignore[arg-type]
    config = ModelConfig(name="bench")
    signature = runtime.inspect(path, config)
    model = runtime.load(path, config, signature, options)
    times = []
    for _ in range(loads):
        started = time.perf_counter()
        model = runtime.load(path, config, signature, options)
        times.append((time.perf_counter() - started) * 1000)
    return model, statistics.median(times)


def latency(
    model: LoadedModel, inputs: dict[str, Any], output: str, runs: int
) -> tuple[float, float]:
    for _ in range(100):
        model.run(inputs, [output])
    times = []
    cpu = time.process_time()
    for _ in range(runs):
        started = time.perf_counter()
        model.run(inputs, [output])
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6, (time.process_time() - cpu) / runs * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    options = LoadOptions(device="cpu", intra_op_threads=args.threads)
    imports = {name: round(import_ms(name)) for name in ("openvino", "tensorflow")}
    rows, refused = [], {}
    with tempfile.TemporaryDirectory() as scratch:
        for label, (path, make, output) in build(Path(scratch), args.threads).items():
            batch1, batch32 = make(1), make(32)
            answers = {}
            for name in RUNTIMES:
                try:
                    model, load_ms = loaded(path, name, options, args.loads)
                except ModelRejected as exc:
                    refused[f"{label} / {name}"] = exc.message[:160]
                    continue
                answers[name] = model.run(batch32, [output])[output]
                p1, c1 = latency(model, batch1, output, args.runs)
                p32, c32 = latency(model, batch32, output, args.runs)
                rows.append(Row(label, name, *(round(v, 1) for v in (load_ms, p1, c1, p32, c32))))
            if len(answers) == 2:  # the same numbers from both
                np.testing.assert_allclose(*answers.values(), rtol=1e-4, atol=1e-5)
    if args.json:
        document = {"imports_ms": imports, "rows": [asdict(r) for r in rows], "refused": refused}
        print(json.dumps(document, indent=2))
        return
    print(f"imports (fresh interpreter): {imports}")
    print("| model | runtime | load | p50 @1 | CPU/call @1 | p50 @32 | CPU/call @32 |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r.model} | {r.runtime} | {r.load_ms} ms | {r.p50_us_1} µs | {r.cpu_us_1} µs "
            f"| {r.p50_us_32} µs | {r.cpu_us_32} µs |"
        )
    for what, why in refused.items():
        print(f"refused: {what}: {why}")


if __name__ == "__main__":
    main()
