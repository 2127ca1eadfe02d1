"""Small helpers shared by integration and e2e tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeVar

import httpx
from prometheus_client.parser import text_string_to_metric_families

from lambdaserve.local.emulator import free_port

__all__ = ["Series", "free_port", "is_live", "scrape", "stop_together", "wait_until"]

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


class Stoppable(Protocol):
    def stop(self) -> None: ...


def stop_together(*parts: Stoppable | None) -> None:
    """Stop every part at once (each one's wait overlaps the others'); re-raise the first
    failure once all have stopped."""
    present = [part for part in parts if part is not None]
    with ThreadPoolExecutor(max_workers=max(len(present), 1)) as pool:
        futures = [pool.submit(part.stop) for part in present]
    for future in futures:
        future.result()


def is_live(client: httpx.Client) -> bool:
    """Whether a server answers its v2 liveness probe yet."""
    try:
        return client.get("/v2/health/live").status_code == 200
    except httpx.HTTPError:
        return False


Series = dict[tuple[str, str, str], float]


def scrape(client: httpx.Client) -> Series:
    """Triton's families of ``/metrics`` (``nv_*``) parsed: value by (family, model, version);
    failures also by (family, model, "<version>/<reason>"). Custom metrics that model code
    recorded in this process (other names, their own labels) are left out."""
    response = client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    found: Series = {}
    for family in text_string_to_metric_families(response.text):
        if not family.name.startswith("nv_"):
            continue
        for sample in family.samples:
            labels = dict(sample.labels)
            reason = labels.pop("reason", None)
            assert set(labels) == {"model", "version"}
            key = (sample.name, labels["model"], labels["version"])
            if reason is None:
                found[key] = sample.value
            else:  # failures by Triton's reason, and their sum
                assert reason in ("REJECTED", "CANCELED", "BACKEND", "OTHER")
                found[(*key[:2], f"{key[2]}/{reason}")] = sample.value
                found[key] = found.get(key, 0) + sample.value
    return found
