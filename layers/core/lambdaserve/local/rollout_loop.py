"""``dev``'s judge: the rollouts function's tick on a thread, every
``LAMBDASERVE_ROLLOUT_INTERVAL_S`` seconds (10 by default), as its schedule runs it deployed."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lambdaserve.wiring.process import Process

logger = logging.getLogger(__name__)


class RolloutLoop:
    def __init__(self, process: Process, every_s: float) -> None:
        self._process = process
        self._every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rollouts", daemon=True)

    def start(self) -> RolloutLoop:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        while not self._stop.wait(self._every_s):
            try:
                self._process.rollouts.advance_all()
            except Exception:  # the next tick tries again, as the schedule would
                logger.exception("rollouts not advanced; trying again next tick")
