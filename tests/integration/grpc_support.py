"""A real `lambdaserve serve --grpc-port` for the gRPC tests, and models that exercise it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import onnx
import tritonclient.grpc as grpcclient
from onnx import TensorProto, helper

from tests.support import free_port, wait_until

# Every v2 datatype an ONNX Identity carries, with its ONNX element type and numpy dtype
# (BF16 has a model of its own: onnxruntime takes it only as OrtValues, strings never).
DATATYPES = {
    "BOOL": (TensorProto.BOOL, np.bool_),
    "INT8": (TensorProto.INT8, np.int8),
    "INT16": (TensorProto.INT16, np.int16),
    "INT32": (TensorProto.INT32, np.int32),
    "INT64": (TensorProto.INT64, np.int64),
    "UINT8": (TensorProto.UINT8, np.uint8),
    "UINT16": (TensorProto.UINT16, np.uint16),
    "UINT32": (TensorProto.UINT32, np.uint32),
    "UINT64": (TensorProto.UINT64, np.uint64),
    "FP16": (TensorProto.FLOAT16, np.float16),
    "FP32": (TensorProto.FLOAT, np.float32),
    "FP64": (TensorProto.DOUBLE, np.float64),
    "BYTES": (TensorProto.STRING, np.object_),
}


def onnx_identities(datatypes: tuple[str, ...] = tuple(DATATYPES)) -> bytes:
    """in_<DT> -> out_<DT> for each of ``datatypes``, each [-1, 2]."""
    nodes, inputs, outputs = [], [], []
    for name in datatypes:
        kind = DATATYPES[name][0]
        nodes.append(helper.make_node("Identity", [f"in_{name}"], [f"out_{name}"]))
        inputs.append(helper.make_tensor_value_info(f"in_{name}", kind, ["batch", 2]))
        outputs.append(helper.make_tensor_value_info(f"out_{name}", kind, ["batch", 2]))
    graph = helper.make_graph(nodes, "identities", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


SLOW_MODEL = b"""
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            time.sleep(float(x.reshape(-1)[0]))
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
        return responses
"""
SLOW_CONFIG = b"""backend: "python"
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }]
"""
# one running, one waiting, the next refused (Triton's default_queue_policy)
SLOW_QUEUE_CONFIG = b"""backend: "python"
max_batch_size: 1
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }]
dynamic_batching { default_queue_policy { max_queue_size: 1 } }
"""


@dataclass(frozen=True)
class Served:
    http: int
    grpc: int
    process: subprocess.Popen[bytes]
    log: str

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc}"

    def client(self) -> grpcclient.InferenceServerClient:
        return grpcclient.InferenceServerClient(self.grpc_url)

    def output(self) -> str:
        with open(self.log, encoding="utf-8", errors="replace") as handle:
            return handle.read()


def _live(url: str) -> bool:
    try:
        return bool(grpcclient.InferenceServerClient(url).is_server_live())
    except Exception:
        return False


def _ready(url: str) -> bool:
    try:
        return bool(grpcclient.InferenceServerClient(url).is_server_ready())
    except Exception:
        return False


@contextmanager
def lambdaserve_serve(*flags: str, killed: bool = False, ready: bool = True) -> Iterator[Served]:
    """`lambdaserve serve --grpc-port` against the environment's stack, once live (and, with
    ``ready``, ready: its versions warm), stopped by SIGTERM (drained: it exits 0)."""
    http, grpc_port = free_port(), free_port()
    log = tempfile.NamedTemporaryFile(prefix="serve-", suffix=".log", delete=False)  # noqa: SIM115 - the server writes it while the test runs
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lambdaserve.cli",
            "serve",
            "--port",
            str(http),
            "--grpc-port",
            str(grpc_port),
            *flags,
        ],
        env=dict(os.environ),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    served = Served(http, grpc_port, process, log.name)
    try:
        probe = _ready if ready else _live
        wait_until(lambda: process.poll() is not None or probe(served.grpc_url), 120)
        assert process.poll() is None, served.output()
        yield served
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
        code = process.wait(timeout=60)
        exits = (0, -signal.SIGTERM, -signal.SIGKILL) if killed else (0, -signal.SIGTERM)
        assert code in exits, f"exit {code}: {served.output()}"
        assert not server_tracebacks(served.output()), served.output()
        os.unlink(log.name)


def server_tracebacks(output: str) -> list[str]:
    """The log records of ``serve`` that carry a traceback of its own: a model's code that
    fails is logged with its traceback by design (``lambdaserve.model_code``), for its author."""
    records = re.split(r"\n(?=\d\d:\d\d:\d\d )", output)
    return [
        record
        for record in records
        if "Traceback" in record and "lambdaserve.model_code" not in record.split("\n", 1)[0]
    ]
