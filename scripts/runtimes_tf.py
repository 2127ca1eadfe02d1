"""The TensorFlow side of scripts/bench_runtimes.py: SavedModels served by lambdaserve's OpenVINO
runtime against TensorFlow running the same SavedModel.

TF Serving's own server (tensorflow_model_server) cannot run here: it is not on PyPI and there
is no Docker engine, so tensorflow-cpu loading the SavedModel the way TF Serving does
(``tf.saved_model.load(dir).signatures["serving_default"]``) stands in for it. TensorFlow lives
in its own throwaway venv (``--tf-python``), never in lambdaserve's: this file is also the
worker that venv runs (stdlib and numpy only at the top, so both sides can import it):

    $TF_PYTHON scripts/runtimes_tf.py make DIR            # the SavedModels below, into DIR
    $TF_PYTHON scripts/runtimes_tf.py cold MODEL_DIR      # import + first load, fresh process
    $TF_PYTHON scripts/runtimes_tf.py measure MODEL_DIR INPUT OUTPUT ROW ...  # warm numbers

The MLP is the ONNX section's MLP 784->256->10 (the same seeded weights as
lambdaserve.local.demo.demo_mlp_bytes); the CNN has the ONNX CNN's layers, channels last as
TensorFlow's CPU convolutions want (32x32x3 -> Conv 16 -> Conv 32 stride 2 -> mean -> 10).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

FIXTURE = Path(__file__).resolve().parents[1] / "tests/fixtures/peer_models/savedmodel_mlp"
NO_SERVING = (
    "TF Serving's own server (tensorflow_model_server) was not run: it is not on PyPI and there "
    "is no Docker engine here; tensorflow-cpu running the SavedModel stands in for it"
)


@dataclass(frozen=True)
class SavedModel:
    name: str
    directory: str  # under the scratch directory, or an absolute path (the fixture)
    input: str
    output: str
    row: tuple[int, ...]


SAVEDMODELS = (
    SavedModel("mlp 784-256-10", "mlp", "x", "y", (784,)),
    SavedModel("cnn 32x32x3", "cnn", "image", "logits", (32, 32, 3)),
    SavedModel("fixture mlp 4-8-3", str(FIXTURE), "x", "y", (4,)),
)


@dataclass(frozen=True)
class TfResult:
    cold_import_ms: float
    cold_load_ms: float
    load_ms: float
    per_row_us: dict[int, float]
    check_input: np.ndarray[Any, Any]
    check_output: np.ndarray[Any, Any]


def skip_reason(tf_python: str | None) -> str | None:
    """Why the TensorFlow comparison cannot run, or None when it can."""
    if not tf_python:
        return "no --tf-python given (a venv with tensorflow-cpu)"
    if not Path(tf_python).is_file():
        return f"--tf-python {tf_python} does not exist"
    probe = worker(tf_python, "probe")
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or [f"exit {probe.returncode}"])[-1]
        return f"{tf_python} cannot import tensorflow: {last}"
    return None


def worker(tf_python: str, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}
    env.pop("PYTHONPATH", None)  # lambdaserve's path means nothing to the TF venv
    return subprocess.run(
        [tf_python, __file__, *argv], capture_output=True, text=True, env=env, check=False
    )


def worker_json(tf_python: str, *argv: str) -> Any:
    done = worker(tf_python, *argv)
    if done.returncode != 0:
        raise RuntimeError(f"TF worker {argv[0]} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def tf_version(tf_python: str) -> str:
    return str(worker_json(tf_python, "probe"))


def make_savedmodels(tf_python: str, scratch: Path) -> None:
    worker_json(tf_python, "make", str(scratch))


def measure_tf(
    tf_python: str,
    model: SavedModel,
    path: Path,
    *,
    check: Path,
    args: Any,
    batches: tuple[int, ...],
) -> TfResult:
    """Cold (median of three fresh processes), warm loads and per-row latency under TF; the
    answer to five rows is written to ``check`` (npz) and returned, to check OpenVINO's."""
    colds = [worker_json(tf_python, "cold", str(path), str(args.threads)) for _ in range(3)]
    warm = worker_json(
        tf_python,
        "measure",
        str(path),
        model.input,
        model.output,
        ",".join(map(str, model.row)),
        ",".join(map(str, batches)),
        str(args.threads),
        str(args.runs),
        str(args.warmup),
        str(args.loads),
        str(check),
    )
    with np.load(check) as saved:
        check_input, check_output = saved["input"], saved["output"]
    return TfResult(
        statistics.median(c[0] for c in colds),
        statistics.median(c[1] for c in colds),
        warm["load_ms"],
        {int(b): v for b, v in warm["per_row_us"].items()},
        check_input,
        check_output,
    )


# --- the worker, run by the TensorFlow venv ---------------------------------------------------


def _make(scratch: Path) -> None:
    import tensorflow as tf

    rng = np.random.default_rng(0)  # demo_mlp_bytes(784, 256, 10): same draws, same order
    w1 = rng.standard_normal((784, 256)).astype(np.float32)
    w2 = rng.standard_normal((256, 10)).astype(np.float32)

    class Mlp(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w1, self.b1 = tf.Variable(w1), tf.Variable(np.zeros(256, np.float32))
            self.w2, self.b2 = tf.Variable(w2), tf.Variable(np.zeros(10, np.float32))

        @tf.function(input_signature=[tf.TensorSpec([None, 784], tf.float32, name="x")])
        def serve(self, x: Any) -> dict[str, Any]:
            h = tf.nn.relu(tf.matmul(x, self.w1) + self.b1)
            return {"y": tf.nn.softmax(tf.matmul(h, self.w2) + self.b2)}

    rng = np.random.default_rng(1)

    def weight(*shape: int) -> Any:  # HWIO kernels, scaled by fan-in
        fan_in = int(np.prod(shape[:-1]))
        return tf.Variable((rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32))

    class Cnn(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.k1, self.b1 = weight(3, 3, 3, 16), weight(1, 16)
            self.k2, self.b2 = weight(3, 3, 16, 32), weight(1, 32)
            self.w3, self.b3 = weight(32, 10), weight(1, 10)

        @tf.function(input_signature=[tf.TensorSpec([None, 32, 32, 3], tf.float32, name="image")])
        def serve(self, image: Any) -> dict[str, Any]:
            c1 = tf.nn.relu(tf.nn.conv2d(image, self.k1, 1, "SAME") + self.b1[0])
            c2 = tf.nn.relu(tf.nn.conv2d(c1, self.k2, 2, "SAME") + self.b2[0])
            pooled = tf.reduce_mean(c2, axis=[1, 2])
            return {"logits": tf.matmul(pooled, self.w3) + self.b3[0]}

    for name, module in (("mlp", Mlp()), ("cnn", Cnn())):
        # as TF Serving lays a version out: saved_model.pb + variables/ in the directory
        tf.saved_model.save(
            module, str(scratch / name), signatures={"serving_default": module.serve}
        )
    print(json.dumps(sorted(p.name for p in scratch.iterdir())))


def _threads(tf: Any, threads: int) -> None:
    if threads:
        tf.config.threading.set_intra_op_parallelism_threads(threads)


def _cold(path: Path, threads: int) -> None:
    start = time.perf_counter()
    import tensorflow as tf

    imported = time.perf_counter()
    _threads(tf, threads)
    tf.saved_model.load(str(path)).signatures["serving_default"]
    loaded = time.perf_counter()
    print(json.dumps([(imported - start) * 1000, (loaded - imported) * 1000]))


def _measure(argv: list[str]) -> None:
    import tensorflow as tf

    path, name_in, name_out, row_text, batch_text = argv[:5]
    threads, runs, warmup, loads = map(int, argv[5:9])
    _threads(tf, threads)
    row = tuple(int(d) for d in row_text.split(","))

    def load() -> Callable[..., Any]:
        return tf.saved_model.load(path).signatures["serving_default"]

    fn = load()
    load_ms = []
    for _ in range(loads):
        start = time.perf_counter()
        load()
        load_ms.append((time.perf_counter() - start) * 1000)
    rng = np.random.default_rng(0)
    check = rng.standard_normal((5, *row)).astype(np.float32)
    np.savez(argv[9], input=check, output=fn(**{name_in: check})[name_out].numpy())
    per_row = {}
    for batch in (int(b) for b in batch_text.split(",")):
        feed = rng.standard_normal((batch, *row)).astype(np.float32)
        count = max(50, runs // (1 if batch == 1 else 4))

        def call(feed: np.ndarray[Any, Any] = feed) -> object:
            # numpy in, numpy out, as a server answering a request would use it
            return {k: t.numpy() for k, t in fn(**{name_in: feed}).items()}

        for _ in range(warmup):
            call()
        samples = []
        for _ in range(count):
            start_ns = time.perf_counter_ns()
            call()
            samples.append(time.perf_counter_ns() - start_ns)
        per_row[batch] = statistics.median(samples) / 1000 / batch
    print(json.dumps({"load_ms": statistics.median(load_ms), "per_row_us": per_row}))


def _worker(argv: list[str]) -> None:
    command = argv[0]
    if command == "probe":
        import tensorflow as tf

        print(json.dumps(tf.__version__))
    elif command == "make":
        _make(Path(argv[1]))
    elif command == "cold":
        _cold(Path(argv[1]), int(argv[2]))
    elif command == "measure":
        _measure(argv[1:])
    else:
        raise SystemExit(f"unknown worker command {command!r}")


if __name__ == "__main__":
    _worker(sys.argv[1:])
