"""The Lambda path's columns of the feature-by-door matrix: the infer function's plane (no
batcher: each request runs alone, as an instance of the function runs it; `dev` serves it
on its one URL, as the integration stack does here) and the queued door (``Prefer:
respond-async``: the requests queue, then the batcher function). Each HTTP door's own
client sends its requests there, as in test_feature_door_matrix.py (serve's columns).

The gRPC doors are serve's: API Gateway's HTTP API carries no gRPC. Traces on the Lambda
path are X-Ray's, one per invocation (template.yaml's ``Tracing: Active``;
tests/deployed/test_tracing.py), not Triton's trace settings. instance_group counts and
max_queue_size on the Lambda path (fleet slots, their wait as queue) are measured where
several instances of the function run at once: tests/deployed/test_instance_counts.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numpy as np

from tests import builders
from tests.integration import matrix_models, test_grpc_peers
from tests.integration.grpc_support import Served
from tests.integration.matrix_doors import BLS, Ask, Door, doors, measure, queued
from tests.integration.test_feature_door_matrix import (
    CONFIG,
    MODEL,
    REFUSED,
    Probes,
    Send,
    table,
)
from tests.integration.test_grpc_peers import needs

torchserve_stubs = test_grpc_peers.torchserve_stubs  # the fixture: TorchServe's own protos

NAMED = "named"  # a Python model answering each request's id as a number
NAMED_CONFIG = b"""
backend: "python"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""
NAMED_CODE = b"""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        told = [np.full((1, 1), float(r.request_id() or -1), np.float32) for r in requests]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT__0", x)]) for x in told]
"""
GRPC = ("v2 gRPC", "v2 gRPC stream", "TorchServe gRPC", "TF Serving gRPC")
LAMBDA_REFUSED: dict[tuple[str, str], str] = {
    **{cell: why for cell, why in REFUSED.items() if cell[1] not in GRPC},
}


def test_every_feature_applies_on_every_door_of_the_lambda_path(stack, torchserve_stubs):
    # Given the matrix's model, the BLS caller, and a model answering its requests' ids
    needs("tensorflow_serving")
    stack.put(f"models/{MODEL}/config.pbtxt", CONFIG)
    stack.put(f"models/{MODEL}/1/model.onnx", builders.onnx_mlp(4, 3))
    stack.put(f"models/{NAMED}/config.pbtxt", NAMED_CONFIG)
    stack.put(f"models/{NAMED}/1/model.py", NAMED_CODE)
    for path, content in matrix_models.bls_caller().items():
        stack.put(f"models/{BLS}/{path}", content)
    for name in (MODEL, NAMED, BLS):
        stack.wait_state(name, 1, "READY", timeout_s=60)
    # the infer function's plane, on the stack's one URL (as `dev` serves it)
    port = int(str(stack.inference.base_url).rsplit(":", 1)[1].strip("/"))
    served = Served(port, 0, cast(Any, None), "")
    lambda_doors: dict[str, Door] = {
        name: door for name, door in doors(torchserve_stubs).items() if name not in GRPC
    }
    lambda_doors["queued"] = queued()
    probes = LambdaProbes(stack, served)
    rng = np.random.default_rng(6)
    found: dict[tuple[str, str], str] = {}
    # When each door sends its requests, new rows each time (never a hit by chance)
    for name, door in lambda_doors.items():
        for feature, probe in probes.features.items():
            send: Send = lambda ask, door=door: door(served, [ask])[0]  # noqa: E731
            rows = rng.random((1, 4), np.float32)
            measure(
                found, (feature, name), lambda probe=probe, send=send, rows=rows: probe(send, rows)
            )
    # Then every cell applies, but the ones refused with their reason (which must not)
    print("\n" + table(found))
    wrong = [c for c, got in found.items() if (got == "applied") == (c in LAMBDA_REFUSED)]
    assert not wrong, f"cells not as expected: {wrong}\n{table(found)}"


class LambdaProbes(Probes):
    """serve's probes, but a request's id read from the model's own answer (no trace files
    on the Lambda path)."""

    def __init__(self, stack: Any, served: Served) -> None:
        super().__init__(stack, served, traces=None)  # type: ignore[arg-type]
        self.features: dict[str, Callable[[Send, Any], None]] = {
            "capture": self.capture,
            "statistics": self.statistics,
            "cache": self.cache,
            "max_batch_size": self.max_batch_size,
            "request_ids": self.request_ids,
            "classification": self.classification,
        }

    def request_ids(self, send: Send, rows: Any) -> None:
        given = str(next(self.ids))
        answer = send(Ask(NAMED, rows, request_id=given)).expect_ok()
        told = float(np.ravel(np.asarray(answer.output, dtype=np.float64))[0])
        assert told == float(given), f"the model was told the id {told}, not {given}"
