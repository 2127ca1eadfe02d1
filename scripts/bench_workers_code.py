"""What a worker process adds to a request of model code: a trivial TorchServe handler, a
trivial Triton Python model and a trivial TorchServe workflow (function node -> model node
-> function node; its model node crosses back to this process, where a trivial runner
answers it, as the data plane would), each called in this process (the runtime's own model) and in
its worker (lambdaserve.workers: shared-memory tensors, a JSON header over a socket pair),
side by side in one run, beside the floor (a bare message to another process and back);
p50/p99 per call in microseconds and CPU per 1,000 calls (this process and its children,
from /proc). The calls are the model server's call to the model,
so the difference is what the worker adds; HTTP, batching and resolution are the same
either way.

    python scripts/bench_workers_code.py [--calls 3000]   (make bench-code-workers)

Writes bench/results/workers-code-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from cpu_cost import CpuMeter

from lambdaserve.config.model_config import ModelConfig
from lambdaserve.runtimes.base import LoadOptions
from lambdaserve.runtimes.registry import runtime_named
from lambdaserve.runtimes.torchserve.handler import SIGNATURE as HANDLER_SIGNATURE
from lambdaserve.tensors.signature import Signature, TensorSpec
from lambdaserve.workers.worker_model import WorkerModel, WorkerSpec

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"
HANDLER = """
def handle(data, context):
    if data is None:
        return None
    return [row["body"] for row in data]
"""
PYTHON_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
        return responses
"""
WORKFLOW_HANDLER = """
def pre(data, context):
    return [data[0]["body"]]


def post(data, context):
    return [data[0]["body"]]
"""
WORKFLOW_SPEC = "models:\n  echo:\n    url: echo.mar\ndag:\n  pre: [echo]\n  echo: [post]\n"
SIGNATURE = Signature(
    inputs=(TensorSpec("INPUT0", "FP32", (-1,)),), outputs=(TensorSpec("OUTPUT0", "FP32", (-1,)),)
)


def measure(call: Callable[[], Any], calls: int) -> dict[str, float]:
    for _ in range(200):  # warm
        call()
    meter = CpuMeter(os.getpid())
    times = np.empty(calls)
    for index in range(calls):
        started = time.perf_counter_ns()
        call()
        times[index] = time.perf_counter_ns() - started
    cost = meter.cost(calls)
    return {
        "p50_us": round(float(np.percentile(times, 50)) / 1000, 1),
        "p99_us": round(float(np.percentile(times, 99)) / 1000, 1),
        "cpu_s_per_1k": cost["server_cpu_s_per_1k"],
    }


def models(directory: Path, kind: str) -> tuple[Any, WorkerModel, Callable[[Any], Any]]:
    """The same code loaded here and in a worker, and one call of it."""
    version = directory / kind / "1"
    version.mkdir(parents=True)
    if kind == "handler":
        path, backend, signature = version / "handler.py", "torchserve_handler", HANDLER_SIGNATURE
        path.write_text(HANDLER)
        config = ModelConfig(kind)
        row = [{"body": bytearray(b'{"x": [1, 2, 3, 4]}')}]

        def call(model: Any) -> Any:
            return model.handle_rows(row)

    elif kind == "workflow":
        path, backend, signature = _workflow(version), "torchserve_handler", HANDLER_SIGNATURE
        config = ModelConfig(kind)
        row = [{"body": bytearray(b'{"x": [1, 2, 3, 4]}')}]

        def call(model: Any) -> Any:
            return model.handle_rows(row)

    else:
        path, backend, signature = version / "model.py", "python", SIGNATURE
        path.write_text(PYTHON_MODEL)
        config = ModelConfig(
            kind, backend="python", inputs=SIGNATURE.inputs, outputs=SIGNATURE.outputs
        )
        inputs = {"INPUT0": np.arange(16, dtype=np.float32)}

        def call(model: Any) -> Any:
            return model.run(inputs, ["OUTPUT0"])

    options = LoadOptions(device="cpu", python_models=True, version=1)
    here = runtime_named(backend).load(path, config, signature, options)
    spec = WorkerSpec(
        model=kind,
        version=1,
        backend=backend,
        model_path=path,
        config=config.to_triton_json(),
        signature=signature.to_json(),
    )
    return here, WorkerModel(spec), call


def _workflow(version: Path) -> Path:
    """An unpacked .war, and its model node's runner in this process: the body echoed."""
    from types import SimpleNamespace

    from lambdaserve.runtimes import model_calls
    from lambdaserve.runtimes.torchserve.context import Answer

    (version / "WAR-INF").mkdir()
    manifest = {"workflow": {"workflowName": "w", "specFile": "spec.yaml", "handler": "h.py"}}
    (version / "WAR-INF" / "MANIFEST.json").write_text(json.dumps(manifest))
    (version / "spec.yaml").write_text(WORKFLOW_SPEC)
    (version / "h.py").write_text(WORKFLOW_HANDLER)
    model_calls.install(
        SimpleNamespace(  # type: ignore[arg-type]  # a port that only runs nodes
            run_node=lambda model, fields, headers: Answer(bytes(dict(fields)["body"]), "a/b")
        )
    )
    return version / "WAR-INF" / "MANIFEST.json"


def socket_floor(calls: int) -> dict[str, float]:
    """The floor: one small message to another process and back over a Unix socket pair
    (no model, no tensors): what any process boundary costs on this machine."""
    import socket

    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the echo child
        ours.close()
        while data := theirs.recv(64):
            theirs.sendall(data)
        os._exit(0)
    theirs.close()

    def ping() -> None:
        ours.sendall(b"ping")
        ours.recv(64)

    try:
        return measure(ping, calls)
    finally:
        ours.close()
        os.waitpid(pid, 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args()
    results: dict[str, Any] = {"calls": args.calls, "cpus": os.cpu_count()}
    results["socket_round_trip"] = socket_floor(args.calls)
    print("socket_round_trip", json.dumps(results["socket_round_trip"]))
    with tempfile.TemporaryDirectory() as scratch:
        for kind in ("handler", "python_model", "workflow"):
            here, worker, call = models(Path(scratch), kind)
            try:
                inline = measure(partial(call, here), args.calls)
                pooled = measure(partial(call, worker), args.calls)
            finally:
                worker.close()
            results[kind] = {
                "in_process": inline,
                "worker": pooled,
                "added_p50_us": round(pooled["p50_us"] - inline["p50_us"], 1),
                "added_p99_us": round(pooled["p99_us"] - inline["p99_us"], 1),
            }
            print(kind, json.dumps(results[kind]))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"workers-code-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
