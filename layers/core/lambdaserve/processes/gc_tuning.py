"""The garbage collector of a `serve` process, set for serving.

Everything alive once the warm-up ends (modules, the app, loaded models and their sessions)
lives as long as the process; ``gc.freeze()`` moves it to the permanent generation, so the
collector's full passes no longer walk it between requests. A request allocates many
short-lived containers that reference counting frees anyway; a higher first-generation
threshold runs the young collection less often.
"""

from __future__ import annotations

import gc
import logging

from lambdaserve.serving.readiness import Readiness

logger = logging.getLogger(__name__)

# allocations (less deallocations) of tracked objects between young collections; Python's
# default is 700. Older generations keep their defaults.
YOUNG_THRESHOLD = 50_000


def tune_for_serving(readiness: Readiness | None) -> None:
    """Raise the young threshold now; freeze what is alive once ``readiness`` is ready."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
    if readiness is None:
        return
    frozen = False

    def on_change(ready: bool) -> None:
        nonlocal frozen
        if ready and not frozen:
            frozen = True
            gc.collect()  # what is garbage now is not kept for good
            gc.freeze()
            logger.info("gc: %d objects frozen after warm-up", gc.get_freeze_count())

    readiness.listen(on_change)
