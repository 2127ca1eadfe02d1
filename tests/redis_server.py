"""A real ``redis-server`` (Debian's package) on a free port, for the response cache's tests
and benchmark: never a mock. Killed with SIGKILL to stage an outage."""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import redis

from lambdaserve.local.emulator import free_port
from tests.support import wait_until

INSTALL = (
    "redis-server is not installed: the response cache's tests run a real one "
    "(apt-get install -y redis-server; .ci/run installs it)"
)


@dataclass
class RedisServer:
    port: int
    process: subprocess.Popen[bytes]
    host: str = "127.0.0.1"

    def client(self) -> redis.Redis:
        return redis.Redis(host=self.host, port=self.port, socket_timeout=5)

    def kill(self) -> None:
        """An outage: the server dies at once, connections and all."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)


def _answers(server: RedisServer) -> bool:
    try:
        return bool(server.client().ping())
    except redis.RedisError:
        return False


@contextmanager
def redis_server() -> Iterator[RedisServer]:
    binary = shutil.which("redis-server")
    assert binary, INSTALL
    port = free_port()
    process = subprocess.Popen(
        # no persistence: nothing written outside the process, nothing read at start
        [
            binary,
            *("--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"),
            # DEBUG SLEEP stages a slow cache (a server that answers nothing for a while)
            *("--enable-debug-command", "local"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = RedisServer(port, process)
    try:
        wait_until(lambda: process.poll() is not None or _answers(server), 30)
        assert process.poll() is None, f"redis-server exited with {process.returncode}"
        yield server
    finally:
        server.kill()
