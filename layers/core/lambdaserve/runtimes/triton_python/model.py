"""Python models in Triton's Python-backend format: ``<v>/model.py`` with ``TritonPythonModel``.

Model code runs only where it serves, and only when ``LAMBDASERVE_PYTHON_MODELS`` allows it.
At publish (the manage function) the file is checked statically — it parses, defines the
class with ``execute``, and the config declares the tensors — and never imported.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from lambdaserve.config.model_config import ModelConfig
from lambdaserve.config.runtime_names import PYTHON_RUNTIME, RuntimeName
from lambdaserve.errors import (
    InferenceError,
    InvalidInput,
    LambdaServeError,
    ModelNotReady,
    ModelRejected,
)
from lambdaserve.runtimes.base import LoadOptions
from lambdaserve.runtimes.code_errors import (
    current_request_ids,
    known_request_ids,
    load_failure,
    log_code_failure,
)
from lambdaserve.runtimes.model_code import DISABLED, new_module, outline, run_one
from lambdaserve.runtimes.request_parameters import clients_own, parameters_of, timeout_us
from lambdaserve.runtimes.sequence_requests import current_sequences
from lambdaserve.runtimes.triton_python import pb_utils
from lambdaserve.runtimes.triton_python.decoupled import one_response, stream_responses
from lambdaserve.tensors.signature import Arrays, Signature


def _handed(
    requests: Sequence[tuple[Mapping[str, np.ndarray[Any, Any]], Sequence[str]]],
) -> list[pb_utils.InferenceRequest]:
    """The requests as ``execute`` gets them: each with its inputs, the outputs asked for,
    its sequence's correlation id and flags, and the client's id, timeout and parameters."""
    ids = known_request_ids()
    handed = []
    for index, ((inputs, outputs), (correlation_id, flags)) in enumerate(
        zip(requests, current_sequences(len(requests)), strict=True)
    ):
        given = parameters_of(index)
        handed.append(
            pb_utils.InferenceRequest(
                inputs=[pb_utils.Tensor(name, array) for name, array in inputs.items()],
                requested_output_names=list(outputs),
                request_id=ids[index] if index < len(ids) else "",
                correlation_id=correlation_id,
                flags=flags,
                timeout=timeout_us(given),
                parameters=clients_own(given),
            )
        )
    return handed


class PythonModelRuntime:
    name: RuntimeName = PYTHON_RUNTIME

    def inspect(self, model_path: Path, config: ModelConfig) -> Signature:
        """Static checks only: the manage function never runs model code."""
        methods = outline(model_path).classes.get("TritonPythonModel")
        if methods is None:
            raise ModelRejected("model.py defines no class TritonPythonModel")
        if "execute" not in methods:
            raise ModelRejected("TritonPythonModel in model.py has no execute(self, requests)")
        if not config.inputs or not config.outputs:
            raise ModelRejected(
                "a Python model declares its inputs and outputs (name, data_type, dims) in "
                "config.pbtxt, or adds them in TritonPythonModel.auto_complete_config, as Triton "
                "requires"
            )
        return Signature(config.inputs, config.outputs)

    def load(
        self, model_path: Path, config: ModelConfig, signature: Signature, options: LoadOptions
    ) -> PythonModel:
        if not options.python_models:
            raise ModelNotReady(DISABLED)
        version_dir = _version_directory(model_path, config.name, options.version)
        sys.modules.setdefault("triton_python_backend_utils", pb_utils)
        module, loader = new_module(model_path, config.name)
        token = pb_utils._model_dir.set(str(version_dir))
        try:
            loader.exec_module(module)
            instance = module.TritonPythonModel()
            if hasattr(instance, "initialize"):
                instance.initialize(_initialize_args(config, options.version, version_dir))
        except Exception as exc:
            log_code_failure("model.py", config.name, options.version, exc)
            raise load_failure("model.py", config.name, exc) from exc
        finally:
            pb_utils._model_dir.reset(token)
        return PythonModel(
            instance,
            signature,
            str(version_dir),
            decoupled=config.decoupled,
            served=(config.name, options.version),
        )


class PythonModel:
    """A loaded TritonPythonModel: the requests of a batch go to one ``execute`` call."""

    device = "cpu"

    def __init__(
        self,
        instance: Any,
        signature: Signature,
        model_dir: str,
        *,
        decoupled: bool = False,
        served: tuple[str, int] = ("", 0),
    ) -> None:
        self._served = served  # model and version, for the log
        self._instance = instance
        self._signature = signature
        self._model_dir = model_dir
        self._closed = False
        self.decoupled = decoupled

    def close(self) -> None:
        """``finalize()``, once, as Triton calls it when the model is unloaded."""
        if self._closed:
            return
        self._closed = True
        finalize = getattr(self._instance, "finalize", None)
        if finalize is not None:
            token = pb_utils._model_dir.set(self._model_dir)
            try:
                finalize()
            finally:
                pb_utils._model_dir.reset(token)

    def run(self, inputs: Mapping[str, np.ndarray[Any, Any]], outputs: Sequence[str]) -> Arrays:
        return run_one(self, inputs, outputs)

    def stream(
        self, inputs: Mapping[str, np.ndarray[Any, Any]], outputs: Sequence[str]
    ) -> Iterator[Arrays]:
        """A decoupled model's responses to one request, as it sends them."""
        return stream_responses(self._instance, self._model_dir, inputs, outputs, _answer)

    def run_requests(
        self, requests: Sequence[tuple[Mapping[str, np.ndarray[Any, Any]], Sequence[str]]]
    ) -> list[Arrays | LambdaServeError]:
        if self.decoupled:
            return [one_response(self.stream(inputs, outputs)) for inputs, outputs in requests]
        batch = _handed(requests)
        token = pb_utils._model_dir.set(self._model_dir)
        try:
            responses = self._instance.execute(batch)
            if inspect.iscoroutine(responses):  # `async def execute`, as Triton allows
                responses = _run_coroutine(responses)
        except pb_utils.TritonModelException as exc:
            log_code_failure("model.py", *self._served, exc, current_request_ids(len(requests)))
            return [InferenceError(f"the model raised: {exc}")] * len(requests)
        except Exception as exc:
            log_code_failure("model.py", *self._served, exc, current_request_ids(len(requests)))
            failed = InferenceError(f"the model raised {type(exc).__name__}: {exc}")
            return [failed] * len(requests)
        finally:
            pb_utils._model_dir.reset(token)
        if not isinstance(responses, list | tuple) or len(responses) != len(requests):
            wrong = InferenceError(
                f"execute must return one InferenceResponse per request: it was given "
                f"{len(requests)} and returned "
                f"{len(responses) if isinstance(responses, list | tuple) else type(responses)}"
            )
            return [wrong] * len(requests)
        return [
            _answer(response, outputs)
            for response, (_, outputs) in zip(responses, requests, strict=True)
        ]


def _answer(response: Any, outputs: Sequence[str]) -> Arrays | LambdaServeError:
    if not isinstance(response, pb_utils.InferenceResponse):
        return InferenceError(
            f"execute returned a {type(response).__name__}, not an InferenceResponse"
        )
    error = response.error() if response.has_error() else None
    if error is not None:
        kind = InvalidInput if error.code() == pb_utils.TritonError.INVALID_ARG else InferenceError
        return kind(error.message())
    produced = {t.name(): t.as_numpy() for t in response.output_tensors()}
    if not produced and outputs:
        return InferenceError(f"the model's response has no output {outputs[0]!r}")
    # an output the response leaves out is left out of the answer, as Triton's Python
    # backend does (a model with optional inputs answers only for those it was given)
    return {name: np.asarray(produced[name]) for name in outputs if name in produced}


def _run_coroutine(coroutine: Any) -> Any:
    """Run an async ``execute`` to completion on its own loop: this thread may already be
    running one (the dynamic batcher runs fast models on the server's loop)."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="python-model") as pool:
        return pool.submit(asyncio.run, coroutine).result()


def _version_directory(model_path: Path, model: str, version: int) -> Path:
    """Triton's layout for ``args['model_repository']``: ``<repository>/<model>/<version>``.

    The cache keeps a version's files by content; a link gives the model the directory
    layout its code may join paths against.
    """
    root = model_path.parent.parent.parent / "python-models" / model
    root.mkdir(parents=True, exist_ok=True)
    link = root / str(version)
    target = model_path.parent.resolve()
    if link.is_symlink() and link.resolve() != target:
        link.unlink()
    if not link.exists():
        link.symlink_to(target, target_is_directory=True)
    return link


def _initialize_args(config: ModelConfig, version: int, version_dir: Path) -> dict[str, str]:
    document = config.to_triton_json()
    document["backend"] = document.get("backend") or "python"
    return {
        "model_config": json.dumps(document),
        "model_instance_kind": "CPU",
        "model_instance_name": f"{config.name}_0",
        "model_instance_device_id": "0",
        "model_repository": str(version_dir.parent),
        "model_version": str(version),
        "model_name": config.name,
    }
