"""TorchServe's worker calls where this process serves model code in workers (``serve``,
``lambdaserve dev``): ``PUT /models/{m}[/{v}]?min_worker=&max_worker=`` scales the
version's workers, and describe lists them (pid, status, memory). Where there are none to
scale (a Lambda function, a model without code, workers off), the callers answer as before."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lambdaserve.errors import InvalidInput, ModelNotReady
from lambdaserve.protocol.names import check_model_name

if TYPE_CHECKING:  # imported where there is a server: the management function has none
    from lambdaserve.serving.model_server import ModelServer

SYNC_WAIT_S = 120.0


def scaled(
    server: ModelServer | None, model: str, version: str | None, query: Mapping[str, str]
) -> tuple[int, dict[str, Any]] | None:
    """The status and body of a scaling call this process carried out, or None."""
    if server is None or ("min_worker" not in query and "max_worker" not in query):
        return None
    name = check_model_name(model)
    if version is not None and not version.isdigit():
        return None  # a label: scaling by number only
    number = int(version) if version is not None else None
    low = _count(query, "min_worker", 1)
    high = _count(query, "max_worker", None) if "max_worker" in query else None
    from lambdaserve.serving.worker_board import scale_workers

    pool = scale_workers(server, name, number, low, high)
    if pool is None:
        return None
    if query.get("synchronous", "").lower() != "true":
        return 202, {"status": "Processing worker updates..."}
    deadline = time.monotonic() + SYNC_WAIT_S
    while len(pool.describe()) != pool.target and time.monotonic() < deadline:
        if pool.broken:  # its workers cannot start: say why, not "scaled to 0"
            raise ModelNotReady(f"{name!r} cannot be scaled: {pool.broken}")
        time.sleep(0.05)
    return 200, {"status": f"Workers scaled to {len(pool.describe())} for model: {name}"}


def worker_fields(server: ModelServer | None, model: str, version: int) -> dict[str, Any]:
    """Describe's ``minWorkers``, ``maxWorkers`` and ``workers`` where the version has
    workers here; empty otherwise (the caller's serverless answer stands)."""
    if server is None:
        return {}
    from lambdaserve.serving.worker_board import described_workers, worker_limits

    workers = described_workers(server, model, version)
    limits = worker_limits(server, model, version)
    scale = server.residency.scale_of(model, version)
    if (workers is None or limits is None) and scale is not None:
        low, high = scale
        return {  # scaled, then dropped by residency anyway: said, and restored on its load
            "minWorkers": low,
            "maxWorkers": high if high is not None else low,
            "workers": [],
            "residency": (
                "unloaded: this process's loaded versions were full (LAMBDASERVE_MAX_LOADED_"
                f"VERSIONS / _BYTES); its next load starts {low} worker(s) again"
            ),
        }
    if workers is None or limits is None:
        return {}
    return {"minWorkers": limits[0], "maxWorkers": limits[1], "workers": workers}


def _count(query: Mapping[str, str], name: str, default: int | None) -> Any:
    try:
        return int(query.get(name, default))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InvalidInput(f"{name}={query.get(name)!r} is not a whole number") from None
