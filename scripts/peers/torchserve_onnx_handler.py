"""TorchServe handler for scripts/bench_pipelines.py: the pipeline's ONNX MLP (logits)
through onnxruntime, one intra-op thread, FP32 bytes in and out (a workflow's middle node)."""

from __future__ import annotations

import os

import numpy as np
import onnxruntime as ort

_session = None


def handle(data, context):
    global _session  # noqa: PLW0603 - TorchServe's function entry point keeps its state here
    if _session is None:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        model = context.manifest["model"]["serializedFile"]
        path = os.path.join(context.system_properties["model_dir"], model)
        _session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    if not data:
        return None
    rows = [np.frombuffer(r.get("data") or r.get("body"), np.float32) for r in data]
    logits = _session.run(None, {"INPUT__0": np.stack(rows)})[0]
    return [row.tobytes() for row in logits]
