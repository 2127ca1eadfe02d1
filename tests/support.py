"""Small helpers shared by integration and e2e tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from lambdaserve.local.emulator import free_port

__all__ = ["free_port", "wait_until"]

T = TypeVar("T")


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
