"""Small helpers shared by integration and e2e tests."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until(probe: Callable[[], T], timeout_s: float = 15.0, interval_s: float = 0.05) -> T:
    """Poll ``probe`` until it returns something truthy; fail with the last value otherwise."""
    deadline = time.monotonic() + timeout_s
    value = probe()
    while not value:
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s}s (last value: {value!r})")
        time.sleep(interval_s)
        value = probe()
    return value
