"""The servers of scripts/bench_pipelines.py: the pipeline pre -> ONNX MLP -> post as a
lambdaserve ensemble (`lambdaserve serve`), a TorchServe workflow (/wfpredict) and one
pytriton callable. Each is a bench_peers.Running; peers install into venvs under bench/peers/.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import boto3
import numpy as np
import onnx
from bench_batching import JSON_HEADERS, serve_environment, start_stack
from bench_peers import Call, Running, _spawn, _tree, _venv, pytriton_env, stop, v2_answer

from lambdaserve.local.demo import demo_mlp_bytes
from lambdaserve.local.emulator import free_port

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE / "pipeline_repo"
TORCHSERVE = [
    "torchserve==0.12.0",
    "torch-model-archiver==0.12.0",
    "torch-workflow-archiver==0.2.15",
    "pyyaml",
    "torch==2.13.0",
    "numpy",
    "onnxruntime",
]
PYTRITON = ["nvidia-pytriton==0.7.0", "onnxruntime", "numpy"]


def logits_onnx() -> bytes:
    """The demo MLP 784->256->10 (seed 0) without its final Softmax: post does that."""
    model = onnx.load_from_string(demo_mlp_bytes(inputs=784, hidden=256, outputs=10, seed=0))
    nodes = model.graph.node
    assert nodes[-1].op_type == "Softmax"
    nodes[-2].output[0] = "OUTPUT__0"
    del nodes[-1]
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def repository_files(logits: bytes) -> dict[str, bytes]:
    """Bucket keys -> bytes: the ensemble, its two Python steps and the ONNX step."""
    files = {"models/mlp/1/model.onnx": logits}
    for file in sorted(REPOSITORY.rglob("*")):
        if file.is_file() and "__pycache__" not in file.parts:
            files[f"models/{file.relative_to(REPOSITORY).as_posix()}"] = file.read_bytes()
    return files


def v2_call(row: np.ndarray) -> Call:
    tensor = {"name": "RAW", "datatype": "FP32", "shape": [1, 784], "data": row.ravel().tolist()}
    return Call(json.dumps({"inputs": [tensor]}).encode(), JSON_HEADERS)


def stop_tree(running: Running) -> None:
    """bench_peers.stop, then whatever of the server's process tree outlived it (Triton's
    server and backend stubs ignore a SIGTERM once their parent is gone)."""
    pids = _tree(running.process.pid)[1:]
    stop(running)
    for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 2.0)):
        alive = [pid for pid in pids if Path(f"/proc/{pid}").exists()]
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while any(Path(f"/proc/{pid}").exists() for pid in alive) and time.monotonic() < deadline:
            time.sleep(0.1)


class Ours:
    """`lambdaserve dev` (the emulator and its pump) plus `lambdaserve serve` in front."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self._stack, self._endpoint = start_stack()
        s3 = boto3.client(
            "s3",
            endpoint_url=self._endpoint,
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
        )
        for key, body in files.items():
            s3.put_object(Bucket="lambdaserve-models", Key=key, Body=body)

    def start(self, work: Path, row: np.ndarray, workers: int) -> Running:
        port = free_port()
        env = serve_environment(self._endpoint, str(work / "ours"), LAMBDASERVE_PYTHON_MODELS="1")
        command = [sys.executable, "-m", "lambdaserve.cli", "serve", "--port", str(port)]
        process = _spawn([*command, "--workers", str(workers)], env, work / "ours.out")
        return Running(
            "lambdaserve",
            process,
            port,
            "/v2/models/pipe/infer",
            {"json": v2_call(row)},
            v2_answer,
            {"workers": workers},
        )

    def close(self) -> None:
        self._stack.send_signal(signal.SIGINT)
        self._stack.wait(30)


def _register_workflow(port: int, war: str, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
            connection.request("POST", f"/workflows?url={war}")
            response = connection.getresponse()
            body = response.read()
            if response.status == 200:
                return
            raise RuntimeError(f"workflow registration: {response.status} {body[:300]!r}")
        except (ConnectionRefusedError, http.client.RemoteDisconnected):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def start_torchserve_workflow(work: Path, logits: Path, row: np.ndarray, workers: int) -> Running:
    """The workflow pre_processing -> mlp -> post_processing; `workers` per node, no batching."""
    venv = _venv("torchserve", TORCHSERVE)
    home = work / "torchserve-workflow"
    shutil.rmtree(home, ignore_errors=True)
    store, wf_store, tmp = home / "model-store", home / "wf-store", home / "tmp"
    for directory in (store, wf_store, tmp):
        directory.mkdir(parents=True)
    bins = venv / "bin"
    subprocess.run(
        [
            str(bins / "torch-model-archiver"),
            "--model-name=mlp",
            "--version=1.0",
            f"--serialized-file={logits}",
            f"--handler={HERE / 'torchserve_onnx_handler.py'}",
            f"--export-path={store}",
        ],
        check=True,
    )
    spec = home / "pipe.yaml"
    spec.write_text(
        f"models:\n  min-workers: {workers}\n  max-workers: {workers}\n  batch-size: 1\n"
        "  max-batch-delay: 1\n  retry-attempts: 1\n  timeout-ms: 10000\n"
        "  mlp:\n    url: mlp.mar\n"
        "dag:\n  pre_processing: [mlp]\n  mlp: [post_processing]\n"
    )
    subprocess.run(
        [
            str(bins / "torch-workflow-archiver"),
            "--workflow-name=pipe",
            f"--spec-file={spec}",
            f"--handler={HERE / 'torchserve_workflow.py'}",
            f"--export-path={wf_store}",
        ],
        check=True,
    )
    ports = {k: free_port() for k in ("inference", "management", "metrics", "grpc", "grpc_m")}
    log4j = home / "log4j2.xml"
    log4j.write_text(
        '<Configuration status="WARN"><Appenders><Console name="C" target="SYSTEM_OUT">'
        '<PatternLayout pattern="%m%n"/></Console></Appenders><Loggers>'
        '<Root level="warn"><AppenderRef ref="C"/></Root></Loggers></Configuration>'
    )
    properties = [
        f"inference_address=http://127.0.0.1:{ports['inference']}",
        f"management_address=http://127.0.0.1:{ports['management']}",
        f"metrics_address=http://127.0.0.1:{ports['metrics']}",
        "grpc_inference_address=127.0.0.1",
        "grpc_management_address=127.0.0.1",
        f"grpc_inference_port={ports['grpc']}",
        f"grpc_management_port={ports['grpc_m']}",
        f"model_store={store}",
        f"workflow_store={wf_store}",
        "disable_system_metrics=true",
        "async_logging=true",
        f"vmargs=-Xmx1g -Djava.io.tmpdir={tmp} -Dlog4j.configurationFile=file://{log4j}",
    ]
    (home / "config.properties").write_text("\n".join(properties) + "\n")
    env = {
        **os.environ,
        "TMPDIR": str(tmp),
        "LOG_LOCATION": str(home / "logs"),
        "METRICS_LOCATION": str(home / "logs"),
        "TS_DISABLE_TOKEN_AUTHORIZATION": "true",
        "OMP_NUM_THREADS": "1",
        "PATH": f"{bins}:{os.environ['PATH']}",
    }
    process = _spawn(
        [
            str(bins / "torchserve"),
            "--start",
            "--foreground",
            "--ncs",
            "--disable-token-auth",
            "--enable-model-api",
            f"--ts-config={home / 'config.properties'}",
            f"--model-store={store}",
            f"--workflow-store={wf_store}",
        ],
        env,
        home / "torchserve.out",
    )
    running = Running(
        "torchserve-wf",
        process,
        ports["inference"],
        "/wfpredict/pipe",
        {"json": Call(json.dumps({"data": row.ravel().tolist()}).encode(), JSON_HEADERS)},
        lambda raw: np.asarray(json.loads(raw), np.float32).ravel(),
        # TorchServe logs a workflow node that missed its timeout-ms (10 s default), then
        # retries it: bench_pipelines counts these lines per point
        {"workers": f"{workers} per node", "log": str(home / "torchserve.out")},
    )
    try:
        _register_workflow(ports["management"], "pipe.war")
    except BaseException:
        stop_tree(running)
        raise
    return running


def start_pytriton(work: Path, logits: Path, row: np.ndarray, instances: int) -> Running:
    venv = _venv("triton", PYTRITON)
    home = work / "pytriton"
    home.mkdir(exist_ok=True)
    python = venv / "bin" / "python"
    env = pytriton_env(python, home)
    ports = [str(free_port()) for _ in range(3)]
    script = str(HERE / "pytriton_pipeline.py")
    process = _spawn(
        [str(python), script, str(logits), *ports, str(instances)], env, home / "triton.out"
    )
    return Running(
        "pytriton",
        process,
        int(ports[0]),
        "/v2/models/pipe/infer",
        {"json": v2_call(row)},
        v2_answer,
        {"instances": instances},
    )
