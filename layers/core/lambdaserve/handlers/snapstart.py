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
