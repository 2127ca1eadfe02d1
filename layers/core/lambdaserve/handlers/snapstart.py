"""Lambda SnapStart hooks: register what runs before the snapshot and after each restore.

``snapshot_restore_py`` ships in Lambda's Python runtimes (and AWS's base images) where
SnapStart is on; elsewhere there is nothing to register with, and the hooks are plain
functions the tests call."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable

logger = logging.getLogger(__name__)


def register(before_snapshot: Callable[[], None], after_restore: Callable[[], None]) -> bool:
    """True when registered with the runtime's snapshot_restore_py."""
    try:
        from snapshot_restore_py import (
            register_after_restore,
            register_before_snapshot,
        )
    except ImportError:
        logger.warning(
            "LAMBDASERVE_COLD_START=snapstart but snapshot_restore_py is missing: this runtime "
            "takes no snapshots, models load on first use"
        )
        return False
    register_before_snapshot(before_snapshot)
    register_after_restore(after_restore)
    return True


def renew_randomness() -> None:
    """Every restore of one snapshot would otherwise draw the same 'random' numbers."""
    random.seed()
    import numpy as np

    np.random.seed()


def start_instance() -> None:
    """The infer function's init phase (its entry file calls this at import): with SnapStart,
    register the hooks; else, in a Lambda sandbox, prepare what every first request needs."""
    import os

    from lambdaserve.wiring.process import current

    if current().settings.cold_start == "snapstart":
        register(before_snapshot, after_restore)
    elif os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):
        prepare_instance()
        # the init phase, from the interpreter's start: the first load's cold start has it
        from lambdaserve.metrics.cold_starts import INIT, process_age_ms

        current().cold_starts.process_ready(INIT, process_age_ms())


def prepare_instance() -> None:
    """The AWS clients (botocore loading its service models: 0.1-0.2 s), the request path's
    modules (the v2 door, the data plane, the event classes: ``handlers.infer`` imports them
    on first use) and the default runtime's import, so the first request pays only the
    catalog read, the download and the session."""
    import lambdaserve.handlers.http_api  # noqa: F401 (for its imports)
    from lambdaserve.config.runtime_names import ONNX_RUNTIME
    from lambdaserve.runtimes.registry import runtime_named
    from lambdaserve.wiring.process import current

    current().server()
    runtime_named(ONNX_RUNTIME)


def before_snapshot() -> None:
    """Before the snapshot: import every route's code and load the models to preload, so a
    restored instance starts with them in memory."""
    from lambdaserve.serving.residency.preload import preload_models
    from lambdaserve.wiring.process import current

    process = current()
    process.lambda_app  # noqa: B018 (built for its imports)
    prepare_instance()
    preload_models(process.server().residency, process.settings.preload_bytes)
    process.flush_records(10.0)  # the loads' records, not frozen half-sent


def after_restore() -> None:
    """After a restore: new AWS clients and catalog views, the loaded models kept, and fresh
    randomness."""
    import time

    from lambdaserve.wiring.process import current

    began = time.perf_counter()
    process = current()
    process.renew_connections()
    renew_randomness()
    # what the function sees of its restore (the snapshot's own restore is Lambda's: its
    # REPORT line's Restore Duration); each version the snapshot holds starts a cold start
    process.cold_starts.restored(
        (time.perf_counter() - began) * 1000, process.server().residency.loaded_versions()
    )
