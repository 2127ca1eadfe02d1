"""Which runtime serves a SavedModel: OpenVINO where it reads the model whole (the default:
no TensorFlow needed, and measured faster per call: docs/from-tfserving.md), TensorFlow
where it cannot:

- a config's ``backend: "tensorflow"`` (or Triton's ``platform: "tensorflow_savedmodel"``)
  chooses TensorFlow before this runs, and ``backend: "openvino"`` keeps OpenVINO whatever
  it refuses;
- a SavedModel with signatures other than ``serving_default``: TensorFlow serves them all
  (OpenVINO converts ``serving_default`` only);
- a graph OpenVINO refuses (lookup tables, string ops, custom ops), or one whose converted
  inputs are not the signature's (OpenVINO dropped TF2 half_plus_two's input).

Made at publish, where TensorFlow is not installed; TensorFlow's own load is then checked
where it serves (``CHECKED_WHERE_IT_SERVES``).
"""

from __future__ import annotations

from pathlib import Path

from lambdaserve.config.model_config import ModelConfig
from lambdaserve.config.runtime_names import OPENVINO_RUNTIME
from lambdaserve.errors import ModelRejected
from lambdaserve.runtimes.base import Runtime
from lambdaserve.runtimes.tensorflow.metagraph import DEFAULT, read_signatures
from lambdaserve.tensors.signature import Signature


def inspect_savedmodel(
    runtime: Runtime, model_path: Path, config: ModelConfig
) -> tuple[Runtime, Signature, str] | None:
    """For a SavedModel that OpenVINO would serve by default: the runtime that serves it,
    its signature and a note; None for any other model (the caller inspects as before)."""
    if (
        runtime.name != OPENVINO_RUNTIME
        or model_path.name != "saved_model.pb"
        or config.backend == "openvino"
    ):
        return None
    from lambdaserve.runtimes.tensorflow.runtime import TensorFlowRuntime

    tensorflow = TensorFlowRuntime()
    others = [s.key for s in read_signatures(model_path.read_bytes()) if s.key != DEFAULT]
    if others:
        note = f"served by TensorFlow: signatures {others} besides {DEFAULT!r}"
        return tensorflow, tensorflow.inspect(model_path, config), note
    try:
        signature = runtime.inspect(model_path, config)
    except ModelRejected as refused:
        try:
            own = tensorflow.inspect(model_path, config)
        except ModelRejected as exc:
            raise ModelRejected(
                f"{refused.message}; TensorFlow cannot serve it either: {exc.message}"
            ) from exc
        return tensorflow, own, f"served by TensorFlow: {refused.message}"
    own = tensorflow.inspect(model_path, config)
    if {t.name for t in signature.inputs} != {t.name for t in own.inputs}:
        note = (
            f"served by TensorFlow: OpenVINO's conversion takes inputs "
            f"{sorted(t.name for t in signature.inputs)}, the signature "
            f"{sorted(t.name for t in own.inputs)}"
        )
        return tensorflow, own, note
    return runtime, signature, ""
