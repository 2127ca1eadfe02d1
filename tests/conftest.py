"""Shared fixtures: credentials that never reach AWS, and the model builders."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from lambdaserve.wiring.process import install


@pytest.fixture(autouse=True)
def _local_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests talk to moto or LocalStack only; never pick up a real profile."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "lambdaserve-tests")


@pytest.fixture(autouse=True)
def _main_thread_event_loop() -> None:
    """The main thread has an open event loop, as Lambda's has when it calls the handler
    (Mangum asks for it): a test that ran asyncio.run before leaves it without one."""
    try:
        loop = asyncio.get_event_loop_policy().get_event_loop()
    except RuntimeError:
        loop = None
    if loop is None or loop.is_closed():
        asyncio.set_event_loop(asyncio.new_event_loop())


@pytest.fixture(autouse=True)
def _no_process_left_behind() -> Iterator[None]:
    """Each test builds (or lets the handlers build) its own process object; none leaks into
    the next test."""
    yield
    install(None)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--aws-endpoint",
        default=None,
        help="run integration tests against this endpoint (e.g. LocalStack) instead of "
        "the embedded moto server; LOCALSTACK_ENDPOINT works too",
    )
