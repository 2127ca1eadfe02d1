"""`lambdaserve serve` where Triton's qa suites dial it: localhost:8000 (HTTP), :8001 (gRPC)
and Triton's metrics on :8002 (L0_model_queue and L0_rate_limiter name localhost). serve
gives Triton's metrics on its HTTP port (``/metrics``; its own 8002 would be TorchServe's
metrics API), so :8002 forwards there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.support import wait_until

HOST = "127.0.0.1"


def _ready() -> bool:
    """Both doors answer (gRPC starts before uvicorn binds its port)."""
    try:
        grpc = grpcclient.InferenceServerClient(f"{HOST}:8001").is_server_ready()
        return bool(grpc and httpclient.InferenceServerClient(f"{HOST}:8000").is_server_ready())
    except Exception:
        return False


@contextmanager
def tritons_ports(log: Path, *flags: str) -> Iterator[Path]:
    """serve on Triton's ports with ``flags``, one process (one queue per model, as Triton
    has), until the block ends; yields its log."""
    with log.open("w") as output:
        server = subprocess.Popen(
            [
                *(sys.executable, "-m", "lambdaserve.cli", "serve", "--host", HOST),
                *(
                    "--port",
                    "8000",
                    "--grpc-port",
                    "8001",
                    "--workers",
                    "1",
                ),
                *flags,
            ],
            env=dict(os.environ),
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        metrics = ThreadingHTTPServer((HOST, 8002), _Metrics)
        threading.Thread(target=metrics.serve_forever, daemon=True).start()
        try:
            wait_until(lambda: server.poll() is not None or _ready(), 120)
            assert server.poll() is None, log.read_text()
            yield log
        finally:
            metrics.shutdown()
            metrics.server_close()
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=60)


class _Metrics(BaseHTTPRequestHandler):
    """Triton's metrics port: serve's /metrics, as it answers it."""

    def do_GET(self) -> None:
        with urllib.request.urlopen(f"http://{HOST}:8000{self.path}", timeout=10) as answer:
            body = answer.read()
            self.send_response(answer.status)
            self.send_header("Content-Type", answer.headers.get("Content-Type", "text/plain"))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass
