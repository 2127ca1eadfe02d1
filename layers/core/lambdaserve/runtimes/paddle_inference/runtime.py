"""Paddle Inference backend: Paddle's own predictor (``paddle.inference``, the CPU
``paddlepaddle`` wheel) for the Paddle models OpenVINO does not read — Paddle 1.x inference
models (``__model__`` with one file per parameter, or with ``__params__``, as Paddle Serving's
examples ship them) and programs with operators OpenVINO has no conversion for (``mul``,
Paddle 1.x's fully connected layer) — and for any ``model.pdmodel`` under
``backend: "paddle_inference"``.

Not the Paddle Serving *pipeline* code (``runtimes/paddle_serving/``). ``paddlepaddle`` is the
optional ``paddle`` extra, imported only in ``load``: ``inspect`` (the manage function) reads
the program's protobuf without it (``program``), checks that its parameters were
uploaded, and leaves the load to the environment that serves it (the registrar's check
where it serves). Without paddle there, ``load`` fails naming the fix.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lambdaserve.config.model_config import ModelConfig
from lambdaserve.config.runtime_names import PADDLE_INFERENCE_RUNTIME, RuntimeName
from lambdaserve.errors import InferenceError, ModelRejected
from lambdaserve.runtimes.base import LoadOptions
from lambdaserve.runtimes.paddle_inference.program import PaddleProgram, read_program
from lambdaserve.tensors.signature import Arrays, Signature

NAME: RuntimeName = PADDLE_INFERENCE_RUNTIME
MISSING = (
    "Paddle Inference (the paddlepaddle package) is not installed where it serves: run "
    "`make dev PADDLE=1` locally, deploy `make build VARIANT=paddle`, or "
    "`pip install 'lambdaserve[paddle]'`"
)


def combined_params(model_path: Path) -> Path:
    """The combined parameter file beside a program file: ``__params__`` beside
    ``__model__``, ``<stem>.pdiparams`` beside ``<stem>.pdmodel`` (a pipeline Op's
    ``inference.pdmodel`` too); one file per parameter otherwise, named as the parameter
    (Paddle 1.x's save_inference_model without params_filename)."""
    if model_path.suffix == ".pdmodel":
        return model_path.with_suffix(".pdiparams")
    return model_path.with_name("__params__")


def _inference() -> Any:
    if "paddle" not in sys.modules and _tensorflow_loaded():
        # libpaddle's first load segfaults in a process where TensorFlow's native library
        # is already loaded (paddlepaddle 3.3 with tensorflow 2.20, every time; the other
        # order works): refusing keeps the other models of this process serving.
        raise InferenceError(
            "Paddle Inference cannot load in this process: TensorFlow was imported here "
            "first (by model code running in-process) and paddle's native library crashes "
            "beside it. Keep model code in workers (LAMBDASERVE_CODE_WORKERS, on by "
            "default) or serve this model from a process without TensorFlow"
        )
    kept = _stop_signals()
    try:
        with warnings.catch_warnings():  # paddle's import warns that no C++ compiler cache
            warnings.simplefilter("ignore")  # (ccache) is installed: nothing here compiles
            import paddle.inference
    except ImportError as exc:
        raise InferenceError(f"{MISSING} ({exc})") from exc
    finally:
        for number, handler in kept.items():
            signal.signal(number, handler)
    return paddle.inference


def _stop_signals() -> dict[int, Any]:
    """SIGTERM's and SIGINT's handlers, to put back after paddle's import: paddle installs
    its own (a C++ "FatalError" report, then death) over them, so a worker that ignores
    them (the serving process drains, then stops it) would die mid-drain, and the serving
    process would lose its own drain. Only the main thread may set them."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    handlers = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}
    return {number: handler for number, handler in handlers.items() if handler is not None}


def _tensorflow_loaded() -> bool:
    return any(name == "tensorflow" or name.startswith("tensorflow.") for name in sys.modules)


def read_checked(model_path: Path) -> PaddleProgram:
    """The program, with every parameter it loads present beside it."""
    program = read_program(model_path.read_bytes(), model_path.name)
    combined = combined_params(model_path)
    if program.parameters and not combined.is_file():
        missing = [p for p in program.parameters if not model_path.with_name(p).is_file()]
        if missing:
            raise ModelRejected(
                f"{model_path.name} loads parameters {', '.join(missing[:5])} that are not in "
                f"the version: upload {combined.name} (the parameters in one file) or one "
                "file per parameter named as it, beside the program, as "
                "save_inference_model wrote them"
            )
    return program


class PaddleInferenceRuntime:
    """Validates from the program (no paddle) and serves with Paddle Inference on CPU."""

    name: RuntimeName = NAME

    def inspect(self, model_path: Path, config: ModelConfig) -> Signature:
        return read_checked(model_path).signature

    def load(
        self, model_path: Path, config: ModelConfig, signature: Signature, options: LoadOptions
    ) -> PaddleInferenceModel:
        inference = _inference()
        combined = combined_params(model_path)
        if combined.is_file():
            settings = inference.Config(str(model_path), str(combined))
        elif model_path.name == "__model__":  # one file per parameter, in the directory
            settings = inference.Config(str(model_path.parent))
        else:
            settings = inference.Config(str(model_path), "")
        settings.disable_gpu()
        settings.disable_glog_info()  # pages of IR-pass lines on every load otherwise
        settings.set_cpu_math_library_num_threads(options.intra_op_threads or os.cpu_count() or 1)
        try:
            predictor = inference.create_predictor(settings)
        except Exception as exc:  # Paddle raises its own errors with C++ context
            raise InferenceError(f"Paddle Inference cannot load the model: {_reason(exc)}") from exc
        return PaddleInferenceModel(predictor)


class PaddleInferenceModel:
    """A predictor on CPU. A predictor runs one call at a time: each run takes one from a
    pool (clones of the first, sharing its weights) and gives it back."""

    device = "cpu"

    def __init__(self, predictor: Any) -> None:
        self._first = predictor
        self._inputs = tuple(predictor.get_input_names())
        self._outputs = tuple(predictor.get_output_names())
        self._idle: list[Any] = [predictor]
        self._lock = threading.Lock()

    def run(self, inputs: Mapping[str, np.ndarray[Any, Any]], outputs: Sequence[str]) -> Arrays:
        for name in inputs:
            if name not in self._inputs:
                raise InferenceError(f"the model has no input {name!r}; it has {self._inputs}")
        if len(inputs) != len(self._inputs):
            raise InferenceError(f"the model takes {len(self._inputs)} inputs, {len(inputs)} given")
        for name in outputs:
            if name not in self._outputs:
                raise InferenceError(f"the model has no output {name!r}; it has {self._outputs}")
        with self._lock:
            predictor = self._idle.pop() if self._idle else self._first.clone()
        try:
            for name, array in inputs.items():
                handle = predictor.get_input_handle(name)
                handle.reshape(list(array.shape))
                handle.copy_from_cpu(np.ascontiguousarray(array))
            predictor.run()
            return {n: predictor.get_output_handle(n).copy_to_cpu() for n in outputs}
        except (RuntimeError, ValueError, TypeError) as exc:
            raise InferenceError(f"Paddle Inference failed: {_reason(exc)}") from exc
        finally:
            with self._lock:
                self._idle.append(predictor)


def _reason(exc: BaseException) -> str:
    """Paddle's messages carry a C++ stack: the line that says what is wrong, without it."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    useful = [
        line
        for line in lines
        if not line.startswith(("C++ Traceback", "---", "[Hint", "No stack trace", "[operator"))
        and not line[:1].isdigit()
    ]
    return (useful or lines or [type(exc).__name__])[0][:300]
