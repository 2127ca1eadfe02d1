"""ONNX Runtime and OpenVINO side by side, one run, this machine, ratios to onnxruntime.

The same models under each runtime as lambdaserve loads them (``runtime.load``, CPU, the
settings it serves with: OpenVINO compiled for f32 with the LATENCY hint): the MLP
784->256->10 of the demo (seeded), and a small CNN (3x32x32 -> Conv 16 -> Relu -> Conv 32
stride 2 -> Relu -> global average -> Gemm 10, the shape of tests/builders.onnx_cnn, larger).
OpenVINO reads the ONNX file (``backend: "openvino"``) and its IR (convert_model + save_model).

Per row: the median of ``--runs`` calls at batch 1 and 32 (after ``--warmup`` calls), divided
by the rows. Load: session creation or read + compile, the median of ``--loads`` in a warm
process; cold: in a fresh process, the library's import and the first load (what a cold
start pays). Every runtime's answer is checked against onnxruntime's on the same rows first.

With ``--tf-python`` (a venv with tensorflow-cpu), a second section: TF SavedModels (an MLP
784->256->10 and a CNN written by that venv at run time, and the committed
tests/fixtures/peer_models/savedmodel_mlp) served by lambdaserve's OpenVINO runtime from
saved_model.pb as TF Serving lays a version out, against TensorFlow itself running the same
SavedModel in a subprocess (scripts/runtimes_tf.py: TF Serving's server cannot run here, so
tensorflow-cpu stands in for it); ratios to tensorflow, answers checked against TensorFlow's.

    python scripts/bench_runtimes.py [--runs 2000] [--threads 0] [--json]
        [--tf-python PATH] [--only onnx|savedmodel]
"""

from __future__ import annotations

import argparse
import json
import os
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
import runtimes_tf
from onnx import TensorProto, helper, numpy_helper

from lambdaserve.config.model_config import ModelConfig
from lambdaserve.local.demo import demo_mlp_bytes
from lambdaserve.runtimes.base import LoadedModel, LoadOptions
from lambdaserve.runtimes.registry import runtime_named

BATCHES = (1, 32)


@dataclass(frozen=True)
class Model:
    name: str
    onnx: bytes
    input: str
    output: str
    row: tuple[int, ...]


@dataclass(frozen=True)
class Row:
    model: str
    runtime: str
    cold_import_ms: float
    cold_load_ms: float
    load_ms: float
    per_row_us: dict[int, float]


def cnn_bytes(seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)

    def weight(name: str, *shape: int) -> Any:
        scale = 1 / np.sqrt(np.prod(shape[1:]) if len(shape) > 1 else 1)
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype("f4"), name)

    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["image", "W1", "B1"], ["c1"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c1"], ["r1"]),
            helper.make_node("Conv", ["r1", "W2", "B2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
            helper.make_node("Relu", ["c2"], ["r2"]),
            helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
            helper.make_node("Flatten", ["g"], ["f"], axis=1),
            helper.make_node("Gemm", ["f", "W3", "B3"], ["logits"], transB=1),
        ],
        "cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        initializer=[
            weight("W1", 16, 3, 3, 3),
            weight("B1", 16),
            weight("W2", 32, 16, 3, 3),
            weight("B2", 32),
            weight("W3", 10, 32),
            weight("B3", 10),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


MODELS = (
    Model("mlp 784-256-10", demo_mlp_bytes(784, 256, 10), "INPUT__0", "OUTPUT__0", (784,)),
    Model("cnn 3x32x32", cnn_bytes(), "image", "logits", (3, 32, 32)),
)


def files_for(model: Model, root: Path) -> dict[str, Path]:
    """model.onnx, and the IR OpenVINO writes of it (FP32 weights)."""
    import openvino

    root.mkdir(parents=True)
    onnx_path = root / "model.onnx"
    onnx_path.write_bytes(model.onnx)
    # the IR beside model.onnx: the answers are checked against onnxruntime's on it
    openvino.save_model(
        openvino.convert_model(str(onnx_path)), str(root / "model.xml"), compress_to_fp16=False
    )
    return {"onnxruntime": onnx_path, "openvino": onnx_path, "openvino (IR)": root / "model.xml"}


def timed_load(runtime: str, path: Path, options: LoadOptions) -> tuple[float, LoadedModel]:
    backend = runtime.split(" ", maxsplit=1)[0]
    config = ModelConfig(name="bench", backend="openvino" if backend == "openvino" else "")
    chosen = runtime_named(backend)
    signature = chosen.inspect(path, config)
    start = time.perf_counter()
    loaded = chosen.load(path, config, signature, options)
    return (time.perf_counter() - start) * 1000, loaded


COLD = """
import json, sys, time
from pathlib import Path

start = time.perf_counter()
import {module}
imported = time.perf_counter()
from lambdaserve.config.model_config import ModelConfig
from lambdaserve.runtimes.base import LoadOptions
from lambdaserve.tensors.signature import Signature
from lambdaserve.runtimes.registry import runtime_named

backend, path, threads = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
config = ModelConfig(name="bench", backend="openvino" if backend == "openvino" else "")
runtime = runtime_named(backend)
before = time.perf_counter()
runtime.load(path, config, Signature((), ()), LoadOptions(device="cpu", intra_op_threads=threads))
loaded = time.perf_counter()
print(json.dumps([(imported - start) * 1000, (loaded - before) * 1000]))
"""


def cold_ms(runtime: str, path: Path, threads: int) -> tuple[float, float]:
    """Import and first load in a fresh process (the median of three)."""
    backend = runtime.split(" ", maxsplit=1)[0]
    module = "onnxruntime" if backend == "onnxruntime" else "openvino"
    script = COLD.format(module=module)
    runs = [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", script, backend, str(path), str(threads)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )
        for _ in range(3)
    ]
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def median_us(call: Callable[[], object], runs: int, warmup: int) -> float:
    for _ in range(warmup):
        call()
    samples = []
    for _ in range(runs):
        start = time.perf_counter_ns()
        call()
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1000


Check = tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]


def measure(
    model: Model, runtime: str, path: Path, args: argparse.Namespace, check: Check | None = None
) -> Row:
    """``check``: rows and the answer expected (default: onnxruntime's on model.onnx)."""
    options = LoadOptions(device="cpu", intra_op_threads=args.threads)
    cold_import, cold_load = cold_ms(runtime, path, args.threads)
    _, loaded = timed_load(runtime, path, options)
    loads = [timed_load(runtime, path, options)[0] for _ in range(args.loads)]
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((5, *model.row)).astype(np.float32)
    if check is None:
        _, reference = timed_load("onnxruntime", path.parent / "model.onnx", options)
        check = rows, reference.run({model.input: rows}, [model.output])[model.output]
    np.testing.assert_allclose(
        loaded.run({model.input: check[0]}, [model.output])[model.output],
        check[1],
        rtol=1e-4,
        atol=1e-5,
    )
    per_row = {}
    for batch in BATCHES:
        feed = {model.input: rng.standard_normal((batch, *model.row)).astype(np.float32)}
        runs = max(50, args.runs // (1 if batch == 1 else 4))

        def call(feed: dict[str, Any] = feed) -> object:
            return loaded.run(feed, [model.output])

        per_row[batch] = median_us(call, runs, args.warmup) / batch
    return Row(model.name, runtime, cold_import, cold_load, statistics.median(loads), per_row)


def savedmodel_rows(args: argparse.Namespace, scratch: Path) -> list[Row]:
    """TensorFlow and lambdaserve's OpenVINO runtime on the same SavedModels."""
    runtimes_tf.make_savedmodels(args.tf_python, scratch)
    rows = []
    for saved in runtimes_tf.SAVEDMODELS:
        directory = scratch / saved.directory  # the fixture's is absolute
        check = scratch / f"{directory.name}-check.npz"
        tf = runtimes_tf.measure_tf(
            args.tf_python, saved, directory, check=check, args=args, batches=BATCHES
        )
        timings = tf.cold_import_ms, tf.cold_load_ms, tf.load_ms, tf.per_row_us
        rows.append(Row(saved.name, "tensorflow", *timings))
        model = Model(saved.name, b"", saved.input, saved.output, saved.row)
        path = directory / "saved_model.pb"  # TF Serving's layout, as serving finds it
        expected = tf.check_input, tf.check_output
        rows.append(measure(model, "openvino (SavedModel)", path, args, expected))
    return rows


def table(rows: list[Row], base_runtime: str = "onnxruntime") -> str:
    model_w = max(16, *(len(r.model) for r in rows))
    runtime_w = max(14, *(len(r.runtime) for r in rows))
    loads = f"{'cold import':>11} {'cold load':>9} {'load':>9} {'ratio':>6}"
    header = f"{'model':<{model_w}} {'runtime':<{runtime_w}} {loads}" + "".join(
        f" {f'us/row @{b}':>11} {'ratio':>6}" for b in BATCHES
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        base = next(r for r in rows if r.model == row.model and r.runtime == base_runtime)
        line = (
            f"{row.model:<{model_w}} {row.runtime:<{runtime_w}} {row.cold_import_ms:>9.0f}ms "
            f"{row.cold_load_ms:>7.1f}ms {row.load_ms:>7.1f}ms {row.load_ms / base.load_ms:>6.2f}"
        )
        for batch in BATCHES:
            ratio = row.per_row_us[batch] / base.per_row_us[batch]
            line += f" {row.per_row_us[batch]:>11.2f} {ratio:>6.2f}"
        lines.append(line)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2000, help="timed calls at batch 1")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--loads", type=int, default=5, help="timed loads after the first")
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (0: all)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--tf-python",
        default=os.environ.get("TF_PYTHON"),
        help="python of a venv with tensorflow-cpu: SavedModels under OpenVINO vs TensorFlow "
        "(default: $TF_PYTHON; without it that section is skipped)",
    )
    parser.add_argument("--only", choices=("onnx", "savedmodel"), help="run one section")
    args = parser.parse_args()
    rows: list[Row] = []
    saved_rows: list[Row] = []
    skipped = runtimes_tf.skip_reason(args.tf_python) if args.only != "onnx" else "--only onnx"
    with tempfile.TemporaryDirectory(prefix="bench-runtimes-") as scratch:
        for index, model in enumerate(MODELS if args.only != "savedmodel" else ()):
            paths = files_for(model, Path(scratch) / str(index))
            rows += [measure(model, runtime, path, args) for runtime, path in paths.items()]
        if skipped is None:
            saved_rows = savedmodel_rows(args, Path(scratch) / "savedmodels")
    import onnxruntime
    import openvino

    versions = {"onnxruntime": onnxruntime.__version__, "openvino": openvino.__version__}
    if skipped is None:
        versions["tensorflow"] = runtimes_tf.tf_version(args.tf_python)
    savedmodel: dict[str, Any] = {"note": runtimes_tf.NO_SERVING}
    savedmodel |= {"skipped": skipped} if skipped else {"rows": [asdict(r) for r in saved_rows]}
    if args.json:
        rows_json = [asdict(r) for r in rows]
        print(
            json.dumps(
                {
                    "cpus": os.cpu_count(),
                    "versions": versions,
                    "rows": rows_json,
                    "savedmodel": savedmodel,
                }
            )
        )
        return
    print(f"{os.cpu_count()} CPUs; " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    if rows:
        print(table(rows))
        print("ratio: to onnxruntime on the same model (below 1: OpenVINO is faster)")
    print("\nSavedModels: lambdaserve's OpenVINO runtime vs TensorFlow on the same SavedModel")
    print(runtimes_tf.NO_SERVING)
    if skipped:
        print(f"TensorFlow comparison skipped: {skipped}")
        return
    print(table(saved_rows, "tensorflow"))
    print("ratio: to tensorflow on the same SavedModel (below 1: OpenVINO is faster)")


if __name__ == "__main__":
    main()
