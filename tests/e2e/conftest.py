"""The e2e journeys run `lambdaserve dev` from the venv `make dev` builds (the Makefile's own
rule, `.[local,images]`), not from the test venv, which has every extra installed."""

from __future__ import annotations

import pytest

from tests.shipped import built


@pytest.fixture(scope="session")
def dev_command() -> list[str]:
    """`lambdaserve` as `make dev` runs it: the console script of make dev's venv."""
    return [str(built("dev") / "bin" / "lambdaserve")]


@pytest.fixture(scope="session")
def dev_torch_command() -> list[str]:
    """The same with `make dev TORCH=1` (PyTorch added)."""
    return [str(built("dev-torch") / "bin" / "lambdaserve")]
