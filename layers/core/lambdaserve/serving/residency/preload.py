"""Loading models ahead of requests: before a SnapStart snapshot (the models marked
``preload``, else every model's default version, within a byte budget), so a restored
instance answers its first request without a download or a session to create."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from lambdaserve.errors import LambdaServeError
from lambdaserve.serving.residency.progress import human_bytes
from lambdaserve.serving.residency.residency import Residency

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Preloaded:
    loaded: tuple[tuple[str, int], ...]
    skipped: tuple[tuple[str, str], ...]  # (model, why)
    bytes_loaded: int


def preload_models(residency: Residency, budget_bytes: int) -> Preloaded:
    """Load the chosen default versions in name order while they fit the budget; what fails
    or would pass the budget is skipped with the reason (never raised)."""
    catalog = residency.resolver.catalog
    names = catalog.all_model_names()
    marked = [name for name in names if (record := catalog.get_model(name)) and record.preload]
    loaded: list[tuple[str, int]] = []
    skipped: list[tuple[str, str]] = []
    used = 0
    for name in marked or names:
        if (
            residency.max_loaded and len(loaded) >= residency.max_loaded
        ):  # loading more would evict what was just loaded
            skipped.append(
                (name, f"the server holds {residency.max_loaded} (LAMBDASERVE_MAX_LOADED_VERSIONS)")
            )
            continue
        try:
            served = residency.resolver.resolve(name, None)
            size = served.record.size
            if used + size > budget_bytes:
                skipped.append(
                    (
                        name,
                        f"{human_bytes(size)} would pass the budget ({human_bytes(budget_bytes)}, "
                        "LAMBDASERVE_PRELOAD_BYTES)",
                    )
                )
                continue
            residency.load(served)
        except LambdaServeError as exc:
            skipped.append((name, exc.message))
            continue
        except Exception as exc:  # a model that cannot load must not stop the snapshot
            skipped.append((name, f"{type(exc).__name__}: {exc}"))
            continue
        used += size
        loaded.append((name, served.version))
    for name, why in skipped:
        logger.warning("not preloaded: %s: %s", name, why)
    logger.info("preloaded %d version(s), %s", len(loaded), human_bytes(used))
    return Preloaded(tuple(loaded), tuple(skipped), used)
