"""`lambdaserve serve --workers N`: worker processes on shared ports under a supervisor."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import onnxruntime as ort
import tritonclient.grpc as grpcclient
from prometheus_client.parser import text_string_to_metric_families

from lambdaserve.local.emulator import free_port
from tests import builders
from tests.support import wait_until

MLP = builders.onnx_mlp(4, 3)
ROW = np.array([[1, 2, 3, 4]], np.float32)
BODY = {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}
WAIT_S = 120  # a worker's start imports the whole stack: slow on a loaded 2-core machine


def test_two_workers_share_the_ports_are_replaced_when_killed_and_drain_on_sigterm(stack, tmp_path):
    # Given a published model and `lambdaserve serve --workers 2`, with a drain delay
    stack.put("models/mlp/1/model.onnx", MLP)
    stack.wait_state("mlp", 1, "READY")
    port, grpc_port = free_port(), free_port()
    log = tmp_path / "serve.log"
    server = _serve(port, grpc_port, log)
    url = f"http://127.0.0.1:{port}"
    expected = ort.InferenceSession(MLP).run(None, {"INPUT__0": ROW})[0][0]
    try:
        wait_until(lambda: _ready(url) == 200, WAIT_S)
        first = set(wait_until(lambda: len(w := _children(server.pid)) == 2 and w, WAIT_S))
        # each worker's model threads are its share of the cores, not every core
        share = str(max(1, len(os.sched_getaffinity(0)) // 2)).encode()
        for pid in first:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            assert b"LAMBDASERVE_INTRA_OP_THREADS=" + share in environ

        # When clients call it over HTTP and gRPC, each on a connection of its own
        answers = _infer_http(url, 48) + _infer_grpc(grpc_port, 16)

        # Then every answer is right, and /metrics, whichever worker answers the scrape,
        # counts all 64 requests, served by both workers
        np.testing.assert_allclose(np.array(answers), np.repeat([expected], 64, 0), rtol=1e-6)
        per_worker = wait_until(lambda: (m := _metrics(url))[0] == 64 and m[1], WAIT_S)
        assert set(per_worker) == {str(pid) for pid in first}
        assert all(count > 0 for count in per_worker.values())

        # (a scrape sums the answering worker's live counts with the other's file, a second
        # old at most: the files themselves must hold all 64 before a kill, as a dead worker's
        # last second is lost by design)
        wait_until(lambda: _counted_in_files(first) == 64, WAIT_S)

        # When a worker is killed outright
        killed = sorted(first)[0]
        os.kill(killed, signal.SIGKILL)
        wait_until(lambda: not Path(f"/proc/{killed}").exists(), WAIT_S)  # reaped

        # Then the other answers meanwhile, and the supervisor starts a replacement that
        # serves too (the counters of the dead one stay in the sums)
        assert len(_infer_http(url, 8)) == 8
        now = set(wait_until(lambda: len(w := _children(server.pid)) == 2 and w, WAIT_S))
        replacement = (now - first).pop()
        wait_until(lambda: _ready(url) == 200, WAIT_S)
        wait_until(
            lambda: _infer_http(url, 4) and _metrics(url)[1].get(str(replacement), 0) > 0,
            WAIT_S,
        )
        # (another worker's samples reach a scrape within a second: its file's period)
        wait_until(lambda: _metrics(url)[0] >= 64 + 8, WAIT_S)

        # When the task is stopped (SIGTERM to the supervisor, as ECS sends it)
        server.send_signal(signal.SIGTERM)
        # Then both workers drain: not ready on any connection, and still answering
        wait_until(lambda: log.read_text().count("SIGTERM: not ready") == 2, WAIT_S)
        assert {_ready(url) for _ in range(8)} == {503}
        assert len(_infer_http(url, 8)) == 8
        # and a second SIGTERM ends the delay: every worker and the supervisor exit cleanly
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=WAIT_S) == 0
        assert not any(Path(f"/proc/{pid}").exists() for pid in now)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        for pid in _children(server.pid):
            os.kill(pid, signal.SIGKILL)


def test_workers_that_cannot_start_stop_the_server_rather_than_restart_forever(stack, tmp_path):
    # Given the gRPC port held by another program (a socket without SO_REUSEPORT)
    port, grpc_port = free_port(), free_port()
    holder = socket.socket()
    holder.bind(("127.0.0.1", grpc_port))
    holder.listen()
    log = tmp_path / "serve.log"
    try:
        # When `serve --workers 2` starts: every worker fails at its start
        server = _serve(port, grpc_port, log)
        try:
            code = server.wait(timeout=600)
        finally:
            if server.poll() is None:
                server.kill()
    finally:
        holder.close()
    # Then the supervisor gives up after three tries a slot, exits non-zero and says why
    assert code != 0
    assert "died 3 times before it started serving" in log.read_text()


def test_a_port_in_use_is_refused_at_once(stack, tmp_path):
    # Given the HTTP port held by another program
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    try:
        # When `serve --workers 2` is asked for it
        held = str(holder.getsockname()[1])
        refused = subprocess.run(
            [sys.executable, "-m", "lambdaserve.cli", "serve", "--workers", "2", "--port", held],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        holder.close()
    # Then it exits 2 before starting any worker, naming the address
    assert refused.returncode == 2
    assert "cannot listen on 127.0.0.1:" in refused.stderr


def _serve(port: int, grpc_port: int, log: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "lambdaserve.cli", "serve", "--port", str(port)]
    command += ["--workers", "2", "--grpc-port", str(grpc_port)]
    env = {**os.environ, "LAMBDASERVE_DRAIN_DELAY_S": "600"}
    env.pop("LAMBDASERVE_INTRA_OP_THREADS", None)  # the supervisor's own share, asserted
    with log.open("wb") as out:
        return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)


def _ready(url: str) -> int:
    try:
        with httpx.Client(base_url=url, timeout=30) as client:  # a connection of its own
            return client.get("/v2/health/ready").status_code
    except httpx.TransportError:
        return 0


def _infer_http(url: str, count: int) -> list[list[float]]:
    def infer(_: int) -> list[float]:
        with httpx.Client(base_url=url, timeout=30) as client:
            response = client.post("/v2/models/mlp/infer", json=BODY)
            assert response.status_code == 200, response.text
            return list(response.json()["outputs"][0]["data"])

    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(infer, range(count)))


def _infer_grpc(port: int, count: int) -> list[list[float]]:
    def infer(_: int) -> list[float]:
        tensor = grpcclient.InferInput("INPUT__0", [1, 4], "FP32")
        tensor.set_data_from_numpy(ROW)
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
        try:
            return list(client.infer("mlp", [tensor]).as_numpy("OUTPUT__0")[0])
        finally:
            client.close()

    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(infer, range(count)))


def _metrics(url: str) -> tuple[float, dict[str, float]]:
    """Successful requests of mlp summed over the workers, and each worker's own (by pid)."""
    with httpx.Client(base_url=url, timeout=30) as client:
        text = client.get("/metrics").text
    total, per_worker = 0.0, {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "nv_inference_request_success" and sample.labels["model"] == "mlp":
                total += sample.value
            if sample.name == "lambdaserve_worker_inference_request_success":
                per_worker[sample.labels["worker"]] = sample.value
    return total, per_worker


def _counted_in_files(workers: set[int]) -> float:
    """Successful requests of mlp as the workers' files (``metrics-<pid>.json``) hold them."""
    environ = Path(f"/proc/{min(workers)}/environ").read_bytes().split(b"\0")
    directory = next(
        e.split(b"=", 1)[1] for e in environ if e.startswith(b"LAMBDASERVE_WORKERS_DIR=")
    )
    total = 0.0
    for pid in workers:
        path = Path(directory.decode()) / f"metrics-{pid}.json"
        if not path.exists():
            return 0.0
        for family in json.loads(path.read_bytes()):
            if family["name"] == "nv_inference_request_success":
                total += sum(
                    v for _, labels, v in family["samples"] if labels.get("model") == "mlp"
                )
    return total


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry.name))
    return found
