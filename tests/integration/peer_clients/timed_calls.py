"""The peer client scripts' calls, in order: one after another, or, where any call has
"at" (seconds), each at that offset on its own thread (requests that must meet in the
server's queue). Imported by the scripts from their own directory."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

Call = dict[str, Any]


def answers(calls: list[Call], answer: Callable[[Call], Call]) -> list[Call]:
    if not any("at" in call for call in calls):
        return [answer(call) for call in calls]
    began = time.monotonic()

    def timed(call: Call) -> Call:
        time.sleep(max(0.0, began + call.get("at", 0) - time.monotonic()))
        return answer(call)

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(timed, calls))
