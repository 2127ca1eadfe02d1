"""The embedded AWS emulator: moto in server mode, in this process, over real HTTP."""

from __future__ import annotations

import functools
import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from moto.dynamodb.models import DynamoDBBackend
from moto.server import ThreadedMotoServer

from lambdaserve.errors import LambdaServeError


class PortInUse(LambdaServeError):
    """A port the local stack needs is taken."""


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS considers free right now (for tests, benchmarks and parallel stacks)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def ensure_port_free(host: str, port: int, what: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        if probe.connect_ex((host, port)) == 0:
            raise PortInUse(f"{host}:{port} is in use; pass another {what} port")


def wait_for_port(host: str, port: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            if probe.connect_ex((host, port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout_s}s")


# DynamoDB's item operations are atomic: a conditional write checks and writes as one step.
# moto's check and write are two Python steps and its server answers on many threads, so
# two "newer observation wins" writes (a config read before its file was uploaded, and
# one after) could both pass the check and the older land last. One lock restores the
# promise the catalog relies on; the emulator's throughput is not what it is for.
_ITEM_OPERATIONS = (
    "put_item",
    "get_item",
    "update_item",
    "delete_item",
    "query",
    "scan",
    "batch_get_item",
    "transact_write_items",
    "transact_get_items",
    "execute_statement",
    "execute_transaction",
    "batch_execute_statement",
)
_ITEMS_LOCK = threading.RLock()


def _atomic(operation: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(operation)
    def locked(*args: Any, **kwargs: Any) -> Any:
        with _ITEMS_LOCK:
            return operation(*args, **kwargs)

    locked.__lambdaserve_atomic__ = True  # type: ignore[attr-defined]
    return locked


def make_dynamodb_atomic() -> None:
    """Serialise moto's DynamoDB item operations (once per process)."""
    for name in _ITEM_OPERATIONS:
        operation = getattr(DynamoDBBackend, name, None)
        if operation is not None and not getattr(operation, "__lambdaserve_atomic__", False):
            setattr(DynamoDBBackend, name, _atomic(operation))


class Emulator:
    """A moto server on ``host:port``; ``endpoint`` is what AWS_ENDPOINT_URL should be."""

    def __init__(self, host: str = "127.0.0.1", port: int = 4566) -> None:
        self.host = host
        self.port = port
        self._server = ThreadedMotoServer(ip_address=host, port=port, verbose=False)

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> Emulator:
        # werkzeug's access log prints every emulator request; the stack's own logs matter.
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        make_dynamodb_atomic()
        ensure_port_free(self.host, self.port, "--aws-port")
        self._server.start()
        wait_for_port(self.host, self.port)
        return self

    def stop(self) -> None:
        self._server.stop()
