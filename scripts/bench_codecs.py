"""What each hot door's codec costs per request, in-process, without a server or a model: the
request bytes decoded into the domain's request and the model's answer encoded, for one row
of 784 FP32 (the MLP of ``bench_peers.py``; its 10 outputs as the answer). Median µs of
``--calls`` calls, after a warm-up.

A before/after ratio comes from running it on each source tree in turn, several times, on
the same machine (``PYTHONPATH=<tree>/layers/core python scripts/bench_codecs.py``); it
prints one JSON line, so runs can be collected and compared.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import bench_peers
import numpy as np

from lambdaserve.protocol import tfserving, torchserve
from lambdaserve.protocol.limits import json_document
from lambdaserve.protocol.v2 import encode_infer_response, parse_infer_request
from lambdaserve.tensors.signature import Signature, TensorSpec


def median_us(call: Callable[[], object], calls: int) -> float:
    for _ in range(min(500, calls)):
        call()
    samples = []
    for _ in range(calls):
        started = time.perf_counter_ns()
        call()
        samples.append(time.perf_counter_ns() - started)
    return round(statistics.median(samples) / 1000, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    row = np.random.default_rng(0).random((1, 784), dtype=np.float32)
    values = row.ravel().tolist()
    answer = {"OUTPUT__0": np.random.default_rng(1).random((1, 10), dtype=np.float32)}
    signature = Signature(
        inputs=(TensorSpec("INPUT__0", "FP32", (-1, 784)),),
        outputs=(TensorSpec("OUTPUT__0", "FP32", (-1, 10)),),
    )
    v2_body = bench_peers.v2_body(row)  # the peer table's requests
    binary = bench_peers.v2_binary_call(row)
    binary_body, header_length = binary.body, int(binary.headers["Inference-Header-Content-Length"])
    predictions_body = json.dumps([values]).encode()
    tf_body = json.dumps({"instances": [values]}).encode()

    def v2_json() -> object:
        request = parse_infer_request(v2_body)
        return encode_infer_response("mlp", 1, request, answer)

    def v2_binary() -> object:
        request = parse_infer_request(binary_body, header_length)
        return encode_infer_response("mlp", 1, request, answer)

    def predictions() -> object:
        prediction = torchserve.parse_prediction(predictions_body, signature.inputs)
        return torchserve.encode_prediction(answer, prediction.single_instance)

    def tf_predict() -> object:
        parsed = tfserving.parse_predict(json_document(tf_body), signature)
        return tfserving.encode_predict(answer, parsed.format)

    doors = {"v2-json": v2_json, "v2-binary": v2_binary, "predictions": predictions}
    doors["tfserving"] = tf_predict
    print(json.dumps({name: median_us(call, args.calls) for name, call in doors.items()}))


if __name__ == "__main__":
    main()
