"""The cost of a sequence's step (issue 39): the state read and the conditional write a step
adds, measured against the same model served without state, in one run:

1. the infer function's direct path (bytes in, bytes out: ``v2_infer``, one request per
   call, as a Lambda instance runs them), c=1;
2. a real ``lambdaserve serve`` over HTTP, c=1;

each with the records in the catalog table (``LAMBDASERVE_SEQUENCE_STORE=dynamodb``) and in
a real ``redis-server`` on this machine (``redis``).

The model is an accumulator with implicit state (ACC_IN -> ACC_OUT, int32 [1]) and a START
control; its stateless twin is the same ONNX file without ``sequence_batching``, its client
sending ACC_IN and START itself. With ``dynamodb`` the record lives in the catalog table of
the embedded emulator (moto over HTTP on this machine, about 2.5 ms a call here), so the
added cost is two of its round trips; deployed, DynamoDB's consistent GetItem and
conditional PutItem each take a few milliseconds in-region (docs/from-triton.md).

    python scripts/bench_sequences.py [--requests 300] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from onnx import TensorProto, helper

from lambdaserve.apps.v2_calls import v2_infer
from lambdaserve.local.emulator import Emulator, free_port
from lambdaserve.local.resources import ensure_resources
from lambdaserve.serving.data_plane import InferenceDataPlane
from lambdaserve.settings import get_settings
from lambdaserve.wiring.aws import AwsClients
from lambdaserve.wiring.inference import build_model_server
from lambdaserve.wiring.manage import build_manage_services

SEQUENCE_CONFIG = b"""max_batch_size: 8
sequence_batching {
  control_input [ { name: "START"
                    control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]
  state [ { input_name: "ACC_IN" output_name: "ACC_OUT" data_type: TYPE_INT32 dims: [ 1 ]
            initial_state { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "z" } } ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


def accumulator() -> bytes:
    def tensor(name: str) -> Any:
        return helper.make_tensor_value_info(name, TensorProto.INT32, ["batch", 1])

    graph = helper.make_graph(
        [
            helper.make_node("Add", ["ACC_IN", "INPUT"], ["ACC_OUT"]),
            helper.make_node("Add", ["ACC_OUT", "START"], ["OUTPUT"]),
        ],
        "accumulator",
        [tensor("INPUT"), tensor("START"), tensor("ACC_IN")],
        [tensor("OUTPUT"), tensor("ACC_OUT")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def body(sequence_id: int | None, start: bool = False) -> bytes:
    inputs: list[dict[str, Any]] = [
        {"name": "INPUT", "datatype": "INT32", "shape": [1, 1], "data": [1]}
    ]
    if sequence_id is None:  # the stateless twin: the client sends what the server would
        for name in ("START", "ACC_IN"):
            inputs.append({"name": name, "datatype": "INT32", "shape": [1, 1], "data": [0]})
        return json.dumps({"inputs": inputs}).encode()
    parameters = {"sequence_id": sequence_id, "sequence_start": start}
    return json.dumps({"inputs": inputs, "parameters": parameters}).encode()


def timed(call: Callable[[], object], count: int) -> list[float]:
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return samples


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": statistics.median(ordered) * 1000,
        "p90_ms": ordered[int(len(ordered) * 0.9)] * 1000,
    }


def compare(name: str, stateless: list[float], steps: list[float]) -> dict[str, Any]:
    plain, step = summary(stateless), summary(steps)
    added = step["p50_ms"] - plain["p50_ms"]
    print(
        f"{name}: stateless p50 {plain['p50_ms']:.2f} ms, step p50 {step['p50_ms']:.2f} ms "
        f"(p90 {plain['p90_ms']:.2f} / {step['p90_ms']:.2f}): added {added:.2f} ms",
        flush=True,
    )
    return {"stateless": plain, "step": step, "added_p50_ms": added}


def direct_path(requests: int) -> dict[str, Any]:
    server = build_model_server(get_settings())
    plane = InferenceDataPlane(lambda: server)

    def call(model: str, data: bytes) -> Callable[[], object]:
        return lambda: v2_infer(plane, model, None, data, None)

    call("acc", body(1, start=True))()
    call("acc-plain", body(None))()
    stateless = timed(call("acc-plain", body(None)), requests)
    steps = timed(call("acc", body(1)), requests)
    return compare("direct path (Lambda)", stateless, steps)


def served(requests: int, work: Path) -> dict[str, Any]:
    port = free_port()
    env = dict(os.environ, LAMBDASERVE_WORK_DIR=str(work / "serve"))
    process = subprocess.Popen(
        [sys.executable, "-m", "lambdaserve.cli", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            for _ in range(600):
                try:
                    if client.get("/v2/health/ready").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.1)

            def call(model: str, data: bytes) -> Callable[[], object]:
                def send() -> None:
                    response = client.post(f"/v2/models/{model}/infer", content=data)
                    response.raise_for_status()

                return send

            call("acc", body(2, start=True))()
            call("acc-plain", body(None))()
            stateless = timed(call("acc-plain", body(None)), requests)
            steps = timed(call("acc", body(2)), requests)
            return compare("lambdaserve serve (HTTP)", stateless, steps)
    finally:
        process.terminate()
        process.wait(timeout=60)


def publish() -> None:
    settings = get_settings()
    clients = AwsClients(settings)
    ensure_resources(clients, settings)
    registrar = build_manage_services(settings, clients).registrar
    model = accumulator()
    for name, config in (("acc", SEQUENCE_CONFIG), ("acc-plain", b"")):
        if config:
            clients.s3.put_object(
                Bucket=settings.bucket, Key=f"models/{name}/config.pbtxt", Body=config
            )
        clients.s3.put_object(Bucket=settings.bucket, Key=f"models/{name}/1/model.onnx", Body=model)
        registrar.reconcile_model(name)


@contextmanager
def emulator_and_redis(prefix: str) -> Iterator[tuple[Path, int]]:
    """The AWS emulator and a redis-server, this process's environment pointed at the
    emulator, a scratch directory; yields the directory and Redis's port."""
    logging.getLogger("moto").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="moto")
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        redis_port = free_port()
        redis = subprocess.Popen(
            ["redis-server", "--port", str(redis_port), "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
        )
        emulator = Emulator("127.0.0.1", free_port()).start()
        os.environ.update(
            AWS_ENDPOINT_URL=emulator.endpoint,
            AWS_ACCESS_KEY_ID="test",
            AWS_SECRET_ACCESS_KEY="test",
            AWS_REGION="us-east-1",
            AWS_DEFAULT_REGION="us-east-1",
            POWERTOOLS_METRICS_DISABLED="true",
            POWERTOOLS_LOG_LEVEL="WARNING",
            LAMBDASERVE_WORK_DIR=str(Path(tmp) / "direct"),
        )
        get_settings.cache_clear()
        try:
            yield Path(tmp), redis_port
        finally:
            emulator.stop()
            redis.terminate()
            redis.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--json", type=Path, help="write every number here")
    args = parser.parse_args()
    with emulator_and_redis("bench-sequences-") as (tmp, redis_port):
        report = {}
        publish()
        for store in ("dynamodb", "redis"):
            os.environ.update(
                LAMBDASERVE_SEQUENCE_STORE=store,
                LAMBDASERVE_REDIS_HOST="127.0.0.1",
                LAMBDASERVE_REDIS_PORT=str(redis_port),
            )
            get_settings.cache_clear()
            print(f"-- records in {store}", flush=True)
            report[store] = {
                "direct": direct_path(args.requests),
                "serve": served(args.requests, tmp),
            }
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
