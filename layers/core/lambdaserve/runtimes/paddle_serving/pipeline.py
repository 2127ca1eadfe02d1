"""Paddle Serving pipelines, unchanged: a version directory holding the user's
``web_service.py`` and ``config.yml`` (and the model folders its Ops name in
``local_service_conf.model_config``) serves as Paddle's pipeline server serves it.

At publish nothing of the user's code runs: config.yml is read (YAML, safely), web_service.py
outlined, and each Op's local model checked by the runtime that will serve it, chosen as for
a standalone Paddle model (``paddle.predictor``: Paddle 1.x ``__model__`` folders on Paddle
Inference; ``*.pdmodel`` on OpenVINO, or Paddle Inference where OpenVINO refuses it). Where
it serves (model code enabled), web_service.py is imported over ``paddle_ops`` and its DAG
run by ``paddle_dag``.

The tensor face (v2 infer, queues, the batcher): BYTES ``key`` and ``value`` in, BYTES ``key``
and ``value`` with INT32 ``err_no`` and BYTES ``err_msg`` out, one request per call, as
Paddle's ``Request`` and ``Response`` carry them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from lambdaserve.config.model_config import ModelConfig
from lambdaserve.config.runtime_names import PIPELINE_RUNTIME, RuntimeName
from lambdaserve.errors import (
    LambdaServeError,
    ModelNotReady,
    ModelRejected,
)
from lambdaserve.runtimes.base import LoadOptions
from lambdaserve.runtimes.code_errors import load_failure
from lambdaserve.runtimes.model_code import DISABLED, new_module, outline, run_one
from lambdaserve.runtimes.paddle_serving import ops as paddle_ops
from lambdaserve.runtimes.paddle_serving import predictor
from lambdaserve.runtimes.paddle_serving.dag import OpSettings, PipelineExecutor, model_folder
from lambdaserve.tensors.signature import Arrays, Signature, TensorSpec

CONFIG_FILE = "config.yml"
SIGNATURE = Signature(
    inputs=(TensorSpec("key", "BYTES", (-1,)), TensorSpec("value", "BYTES", (-1,))),
    outputs=(
        TensorSpec("key", "BYTES", (-1,)),
        TensorSpec("value", "BYTES", (-1,)),
        TensorSpec("err_no", "INT32", (1,)),
        TensorSpec("err_msg", "BYTES", (1,)),
    ),
)


class PaddlePipelineRuntime:
    name: RuntimeName = PIPELINE_RUNTIME

    def inspect(self, model_path: Path, config: ModelConfig) -> Signature:
        """config.yml read, web_service.py outlined, each Op's model compiled: no user code."""
        base = model_path.parent
        document = read_config(base)
        if not any(methods for methods in outline(model_path).classes.values()):
            raise ModelRejected(
                "web_service.py defines no class: subclass Op and WebService as Paddle "
                "Serving's pipeline examples do"
            )
        for name, section in (document.get("op") or {}).items():
            folder = ((section or {}).get("local_service_conf") or {}).get("model_config")
            if folder:
                try:
                    predictor.check(model_folder(base, str(folder)))
                except ModelRejected as exc:
                    raise ModelRejected(f"op {name!r}: {exc.message}") from None
                except ValueError as exc:
                    raise ModelRejected(f"op {name!r}: {exc}") from None
        return SIGNATURE

    def load(
        self, model_path: Path, config: ModelConfig, signature: Signature, options: LoadOptions
    ) -> PipelineModel:
        if not options.python_models:
            raise ModelNotReady(DISABLED)
        from lambdaserve.runtimes.torchserve.worker import imports_from

        base = model_path.parent
        paddle_ops.install_modules()
        try:
            with paddle_ops.collecting(base) as found, imports_from(base):
                module, loader = new_module(model_path, config.name)
                loader.exec_module(module)
            if len(found) != 1:
                raise ValueError(
                    f"web_service.py prepared {len(found)} pipelines; call "
                    "prepare_pipeline_config once, as Paddle's server runs one"
                )
            executor = PipelineExecutor(found[0], _predictors(base))
        except LambdaServeError:
            raise
        except Exception as exc:
            raise load_failure("web_service.py", config.name, exc) from exc
        return PipelineModel(executor, base)


def read_config(base: Path) -> dict[str, Any]:
    import yaml

    path = base / CONFIG_FILE
    if not path.is_file():
        raise ModelRejected(
            "web_service.py needs its config.yml beside it (the DAG and the op: sections)"
        )
    try:
        document = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ModelRejected(f"config.yml is not YAML: {exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("op") or {}, dict):
        raise ModelRejected("config.yml must be a mapping whose op: section maps op names")
    return document


def _predictors(base: Path) -> Any:
    def predictor_for(op: str, settings: OpSettings) -> predictor.LocalPredictor:
        return predictor.LocalPredictor.open(model_folder(base, str(settings.model_config)))

    return predictor_for


class PipelineModel:
    """A served pipeline: each request through the DAG; requests of one call run at once,
    so Ops with batch_size can gather them."""

    device = "cpu"

    def __init__(self, executor: PipelineExecutor, base: Path) -> None:
        self._executor = executor
        self._base = base
        self._pool = ThreadPoolExecutor(8, thread_name_prefix="paddle-pipeline")

    def close(self) -> None:
        from lambdaserve.runtimes.torchserve.worker import forget

        self._executor.close()
        self._pool.shutdown(wait=False)
        forget(self._base)  # its helper modules no longer shadow anything

    def call(self, request: paddle_ops.PipelineRequest) -> paddle_ops.PipelineResponse:
        return self._executor.call(request)

    def run(self, inputs: Mapping[str, np.ndarray[Any, Any]], outputs: Sequence[str]) -> Arrays:
        return run_one(self, inputs, outputs)

    def run_requests(
        self, requests: Sequence[tuple[Mapping[str, np.ndarray[Any, Any]], Sequence[str]]]
    ) -> list[Arrays | LambdaServeError]:
        calls = [_request(inputs) for inputs, _ in requests]
        responses = (
            [self.call(calls[0])] if len(calls) == 1 else list(self._pool.map(self.call, calls))
        )
        answers: list[Arrays | LambdaServeError] = []
        for response, (_, names) in zip(responses, requests, strict=True):
            arrays = {
                "key": np.array([k.encode() for k in response.key], dtype=object),
                "value": np.array([v.encode() for v in response.value], dtype=object),
                "err_no": np.array([response.err_no], dtype=np.int32),
                "err_msg": np.array([response.err_msg.encode()], dtype=object),
            }
            answers.append({name: arrays[name] for name in names} if names else arrays)
        return answers


def _request(inputs: Mapping[str, np.ndarray[Any, Any]]) -> paddle_ops.PipelineRequest:
    def texts(name: str) -> list[str]:
        values = np.asarray(inputs.get(name, np.array([], dtype=object))).reshape(-1)
        return [v.decode() if isinstance(v, bytes) else str(v) for v in values.tolist()]

    return paddle_ops.PipelineRequest(key=texts("key"), value=texts("value"))
