"""Triton (nvidia-pytriton's bundled tritonserver) serving python_backend's `repeat` as a
decoupled model, for scripts/bench_decoupled.py, in pytriton's venv:

    python pytriton_repeat.py HTTP_PORT GRPC_PORT METRICS_PORT

One response per element of IN (OUT: the element, IDX: its index), then the final flag.
"""

from __future__ import annotations

import sys

import numpy as np
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig


def repeat(requests):
    for request in requests:  # one request per call: no batching
        for index, value in enumerate(request["IN"]):
            yield [
                {
                    "OUT": np.array([value], dtype=np.int32),
                    "IDX": np.array([index], dtype=np.uint32),
                }
            ]


def main() -> None:
    http_port, grpc_port, metrics_port = sys.argv[1:4]
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
            model_name="repeat_int32",
            infer_func=repeat,
            inputs=[Tensor(name="IN", dtype=np.int32, shape=(-1,))],
            outputs=[
                Tensor(name="OUT", dtype=np.int32, shape=(1,)),
                Tensor(name="IDX", dtype=np.uint32, shape=(1,)),
            ],
            config=ModelConfig(batching=False, decoupled=True),
            strict=False,
        )
        triton.serve()


if __name__ == "__main__":
    main()
