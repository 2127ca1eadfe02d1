"""Triton (through nvidia-pytriton's bundled tritonserver) serving the benchmark's ONNX MLP.

Run by scripts/bench_peers.py in its own venv:
    python pytriton_server.py MODEL.onnx HTTP_PORT GRPC_PORT METRICS_PORT DELAY_US INSTANCES
The ONNX model runs through onnxruntime in the bound callable; Triton's dynamic batcher
(max batch 8, max_queue_delay_microseconds) batches in front of it.
"""

from __future__ import annotations

import sys

import numpy as np
import onnxruntime as ort
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig


def main() -> None:
    model, http_port, grpc_port, metrics_port, delay_us, instances = sys.argv[1:7]
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1

    def make_callable():
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])

        @batch
        def infer(INPUT__0: np.ndarray) -> dict[str, np.ndarray]:
            return {"OUTPUT__0": session.run(None, {"INPUT__0": INPUT__0})[0]}

        return infer

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
            model_name="mlp",
            infer_func=[make_callable() for _ in range(int(instances))],
            inputs=[Tensor(name="INPUT__0", dtype=np.float32, shape=(784,))],
            outputs=[Tensor(name="OUTPUT__0", dtype=np.float32, shape=(10,))],
            config=ModelConfig(
                max_batch_size=8,
                batcher=DynamicBatcher(max_queue_delay_microseconds=int(delay_us)),
            ),
            strict=False,
        )
        triton.serve()


if __name__ == "__main__":
    main()
