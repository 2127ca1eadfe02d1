"""`lambdaserve serve --management-port`: TorchServe's management API (8081) beside the
inference API, over serve's own model server, so `curl -X PUT .../models/m?min_worker=3`
scales a handler's workers there as it does in TorchServe; with `--workers N` (N processes,
each with its own workers) scaling is refused, never answered for one process of N."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest

from tests.integration.grpc_support import lambdaserve_serve
from tests.integration.test_code_workers_served import HANDLER
from tests.support import free_port, wait_until

WAIT_S = 120


def pids(described: list[dict]) -> set[int]:
    return {w["pid"] for w in described[0]["workers"] if w["status"] == "READY"}


def test_serve_scales_a_handlers_workers_through_torchserves_http_management_api(stack):
    """Given a handler with model-config.yaml minWorkers 1 / maxWorkers 4, published, and
    `lambdaserve serve --management-port P` with workers on,
    When a client predicts, describes the model on P, and PUTs min_worker=3 synchronously,
    then min_worker=1 with max_worker=4, then min_worker=1 alone,
    Then describe lists serve's own live worker, the first PUT answers TorchServe's 200
    "Workers scaled to 3" with three worker processes described; the second keeps the
    three (TorchServe stops only workers above max_worker) and describe says 1 / 4; the
    third (max_worker defaults to min_worker, as in TorchServe) brings it down to one."""
    stack.put("models/upper/1/handler.py", HANDLER.encode())
    stack.put("models/upper/1/model-config.yaml", b"minWorkers: 1\nmaxWorkers: 4\n")
    stack.wait_state("upper", 1, "READY")
    port = free_port()
    with lambdaserve_serve("--management-port", str(port)) as served:
        api = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT_S)
        answer = httpx.post(
            f"http://127.0.0.1:{served.http}/predictions/upper", content=b"hi", timeout=WAIT_S
        )
        assert answer.status_code == 200 and answer.text == "HI"
        described = api.get("/models/upper").json()
        [first] = pids(described)
        assert first != os.getpid() and first != served.process.pid
        assert os.path.exists(f"/proc/{first}")
        assert (described[0]["minWorkers"], described[0]["maxWorkers"]) == (1, 4)

        scaled = api.put("/models/upper?min_worker=3&synchronous=true")
        assert scaled.status_code == 200, scaled.text
        assert scaled.json() == {"status": "Workers scaled to 3 for model: upper"}
        assert len(pids(api.get("/models/upper").json())) == 3

        kept = api.put("/models/upper?min_worker=1&max_worker=4")
        assert kept.status_code == 202, kept.text
        assert kept.json() == {"status": "Processing worker updates..."}
        described = api.get("/models/upper").json()
        assert len(pids(described)) == 3
        assert (described[0]["minWorkers"], described[0]["maxWorkers"]) == (1, 4)

        api.put("/models/upper?min_worker=1")
        wait_until(lambda: len(api.get("/models/upper").json()[0]["workers"]) == 1, WAIT_S)
        described = api.get("/models/upper").json()
        assert (described[0]["minWorkers"], described[0]["maxWorkers"]) == (1, 1)
        again = httpx.post(
            f"http://127.0.0.1:{served.http}/predictions/upper", content=b"yo", timeout=WAIT_S
        )
        assert again.text == "YO"


def test_serve_refuses_a_management_port_with_several_workers():
    """Given `serve --workers 2 --management-port P`,
    When it starts,
    Then it exits 2 saying the management port needs one worker, and why."""
    refused = subprocess.run(
        [
            sys.executable,
            "-m",
            "lambdaserve.cli",
            "serve",
            "--workers",
            "2",
            "--management-port",
            str(free_port()),
            "--grpc-port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert refused.returncode == 2, refused.stderr
    assert "--management-port needs --workers 1" in refused.stderr


def test_grpc_scaling_is_refused_when_serve_runs_several_processes(stack):
    """Given a handler published and `serve --workers 2 --grpc-management` with workers on
    (two processes behind one port, each with its own worker of the handler),
    When a client asks TorchServe's ScaleWorker for min_worker=2,
    Then it is refused with INVALID_ARGUMENT saying why (it would reach one process of
    two), and the handler still answers."""
    import grpc

    from lambdaserve.protocol.grpc.protos import torchserve_management_pb2 as mpb
    from lambdaserve.protocol.grpc.protos import torchserve_management_pb2_grpc as mgrpc

    stack.put("models/upper/1/handler.py", HANDLER.encode())
    stack.wait_state("upper", 1, "READY")
    with lambdaserve_serve("--workers", "2", "--grpc-management") as served:
        with grpc.insecure_channel(served.grpc_url) as channel:
            stub = mgrpc.ManagementAPIsServiceStub(channel)
            with pytest.raises(grpc.RpcError) as refused:
                stub.ScaleWorker(
                    mpb.ScaleWorkerRequest(model_name="upper", min_worker=2), timeout=WAIT_S
                )
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "serve --workers 2" in refused.value.details()
        assert "reaches one of them" in refused.value.details()
        answer = httpx.post(
            f"http://127.0.0.1:{served.http}/predictions/upper", content=b"ok", timeout=WAIT_S
        )
        assert answer.text == "OK"
