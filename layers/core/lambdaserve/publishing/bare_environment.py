"""The environment a sandboxed child starts with: what it needs to run Python and nothing that
grants anything (no AWS_*, no LAMBDASERVE_*, no user site, a scratch HOME)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

BASE = ("PATH", "LANG", "LC_ALL", "TZ")


def bare_environment(home: str | Path, kept: Iterable[str] = (), **extra: str) -> dict[str, str]:
    """``BASE`` and ``kept`` from this process's environment, ``HOME`` set to ``home``, no
    user site-packages; ``extra`` added as given."""
    environment = {k: os.environ[k] for k in (*BASE, *kept) if k in os.environ}
    environment.update(HOME=str(home), PYTHONNOUSERSITE="1", **extra)
    return environment
