"""Triton (nvidia-pytriton's bundled tritonserver) serving the pipeline as one callable:
pre -> onnxruntime MLP -> post, for scripts/bench_pipelines.py, in its own venv:

    python pytriton_pipeline.py LOGITS.onnx HTTP_PORT GRPC_PORT METRICS_PORT INSTANCES

No batching (as every server in that benchmark): one request per execution.
"""

from __future__ import annotations

import sys

import numpy as np
import onnxruntime as ort
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig


def make_callable(model: str):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])

    def infer(requests):
        responses = []
        for request in requests:
            pixels = ((request["RAW"] - 0.5) / 0.25).astype(np.float32)
            x = session.run(None, {"INPUT__0": pixels})[0]
            e = np.exp(x - x.max(axis=1, keepdims=True))
            responses.append({"PROBS": (e / e.sum(axis=1, keepdims=True)).astype(np.float32)})
        return responses

    return infer


def main() -> None:
    model, http_port, grpc_port, metrics_port, instances = sys.argv[1:6]
    config = TritonConfig(
        http_address="127.0.0.1",
        http_port=int(http_port),
        grpc_address="127.0.0.1",
        grpc_port=int(grpc_port),
        metrics_address="127.0.0.1",
        metrics_port=int(metrics_port),
        log_verbose=0,
    )
    with Triton(config=config) as triton:
        triton.bind(
            model_name="pipe",
            infer_func=[make_callable(model) for _ in range(int(instances))],
            inputs=[Tensor(name="RAW", dtype=np.float32, shape=(-1, 784))],
            outputs=[Tensor(name="PROBS", dtype=np.float32, shape=(-1, 10))],
            config=ModelConfig(batching=False),
            strict=False,
        )
        triton.serve()


if __name__ == "__main__":
    main()
