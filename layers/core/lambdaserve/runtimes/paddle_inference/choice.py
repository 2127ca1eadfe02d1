"""Which runtime serves a ``model.pdmodel``: OpenVINO where it reads the model (the default:
no paddle needed), Paddle Inference where it cannot (operators OpenVINO's Paddle frontend
has no conversion for, such as Paddle 1.x's ``mul``).

The choice is made at publish, in the manage function, and the catalog records it; Paddle
Inference's own load (paddle installed, the program runs) is then checked where it serves.
"""

from __future__ import annotations

from pathlib import Path

from lambdaserve.config.model_config import ModelConfig
from lambdaserve.config.runtime_names import OPENVINO_RUNTIME
from lambdaserve.errors import ModelRejected
from lambdaserve.runtimes.base import Runtime
from lambdaserve.tensors.signature import Signature


def inspect_choosing(
    runtime: Runtime, model_path: Path, config: ModelConfig
) -> tuple[Runtime, Signature, str]:
    """``runtime.inspect``, or for a Paddle program OpenVINO refuses (and no config forcing
    OpenVINO), Paddle Inference's: the runtime that will serve, the signature and a note."""
    if (
        runtime.name != OPENVINO_RUNTIME
        or model_path.name != "model.pdmodel"
        or config.backend == "openvino"
    ):
        return runtime, runtime.inspect(model_path, config), ""
    try:
        return runtime, runtime.inspect(model_path, config), ""
    except ModelRejected as refused:
        from lambdaserve.runtimes.paddle_inference.runtime import PaddleInferenceRuntime

        paddle = PaddleInferenceRuntime()
        try:
            signature = paddle.inspect(model_path, config)
        except ModelRejected as exc:
            raise ModelRejected(
                f"{refused.message}; Paddle Inference cannot serve it either: {exc.message}"
            ) from exc
        return paddle, signature, f"served by Paddle Inference: {refused.message}"
