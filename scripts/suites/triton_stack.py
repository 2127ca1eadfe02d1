"""A `lambdaserve dev` stack on Triton's ports for the suites: start one (the code on this
process's PYTHONPATH), or use one already running there."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

INFERENCE_PORT = 8000  # qa tests hardcode localhost:8000
MANAGEMENT_PORT = 8011
AWS_PORT = 4577


@dataclass
class Stack:
    inference_url: str
    management_url: str
    aws_endpoint: str
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def _urls(process: subprocess.Popen[bytes] | None = None, log: Path | None = None) -> Stack:
    return Stack(
        f"http://127.0.0.1:{INFERENCE_PORT}",
        f"http://127.0.0.1:{MANAGEMENT_PORT}",
        f"http://127.0.0.1:{AWS_PORT}",
        process,
        log,
    )


def use_running() -> Stack:
    if not (port_open(INFERENCE_PORT) and port_open(MANAGEMENT_PORT) and port_open(AWS_PORT)):
        raise SystemExit(
            f"--use-running: no lambdaserve dev on ports {INFERENCE_PORT}/{MANAGEMENT_PORT}/"
            f"{AWS_PORT}; start it with `lambdaserve dev --no-demo --inference-port "
            f"{INFERENCE_PORT} --management-port {MANAGEMENT_PORT} --aws-port {AWS_PORT}`"
        )
    return _urls()


def start(work_dir: Path, timeout_s: float = 120) -> Stack:
    """`python -m lambdaserve.cli dev` with Python models on, its own scratch and log."""
    busy = [p for p in (INFERENCE_PORT, MANAGEMENT_PORT, AWS_PORT) if port_open(p)]
    if busy:
        raise SystemExit(f"ports {busy} are taken: stop what serves there or pass --use-running")
    log = work_dir / "dev.log"
    env = {
        **os.environ,
        "LAMBDASERVE_PYTHON_MODELS": "1",
        "LAMBDASERVE_WORK_DIR": tempfile.mkdtemp(prefix="lambdaserve-", dir=work_dir),
    }
    command = [sys.executable, "-m", "lambdaserve.cli", "dev", "--no-demo"]
    command += ["--inference-port", str(INFERENCE_PORT), "--management-port", str(MANAGEMENT_PORT)]
    command += ["--aws-port", str(AWS_PORT), "--access-log"]
    with log.open("wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"lambdaserve dev exited with {process.returncode}; see {log}")
        if port_open(INFERENCE_PORT) and port_open(MANAGEMENT_PORT):
            return _urls(process, log)
        time.sleep(0.5)
    process.kill()
    raise SystemExit(f"lambdaserve dev did not open its ports in {timeout_s:.0f} s; see {log}")
