"""`serve`'s garbage collector: a higher young threshold, and what lives after the warm-up
frozen out of the collector's passes — in `serve`'s own process only.

``gc.freeze`` and the thresholds are the whole process's: each check runs in a fresh
interpreter of its own, never in the test process (whose collector hosts everything else
the suite loaded)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def _run(body: str) -> None:
    code = "import gc\n" + textwrap.dedent(body)
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr


def test_serving_raises_the_young_threshold_and_freezes_once_ready():
    """Given a server still warming up, in a process of its own
    When its collector is tuned, and then it becomes ready, drains, and would be ready again
    Then the young threshold is raised at once, nothing is frozen before ready, what was
    alive at ready is frozen then, and what comes later is not."""
    _run(
        """
        from lambdaserve.processes.gc_tuning import YOUNG_THRESHOLD, tune_for_serving
        from lambdaserve.serving.residency.preload import Preloaded
        from lambdaserve.serving.readiness import Readiness

        def collected(thing):
            return any(candidate is thing for candidate in gc.get_objects())

        readiness = Readiness()
        tune_for_serving(readiness)
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD
        assert gc.get_freeze_count() == 0
        kept = []  # alive (and tracked) when the warm-up ends
        readiness.warmed(Preloaded((), (), 0))
        assert gc.get_freeze_count() > 0
        assert not collected(kept)  # frozen: the collector no longer walks it
        later = []
        readiness.drain()
        readiness.warmed(Preloaded((), (), 0))
        assert collected(later)  # not frozen again
        """
    )


def test_without_readiness_only_the_threshold_changes():
    """Given a process with no readiness (nothing says when it is warm)
    When its collector is tuned
    Then the young threshold is raised and nothing is frozen."""
    _run(
        """
        from lambdaserve.processes.gc_tuning import YOUNG_THRESHOLD, tune_for_serving

        tune_for_serving(None)
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD
        assert gc.get_freeze_count() == 0
        """
    )


@pytest.mark.parametrize("own_process", [False, True])
def test_only_an_app_that_owns_its_process_tunes_the_collector(own_process):
    """Given the serving app's lifespan, hosted in another program (a test, the dev stack)
    or owning its process (`serve` and each of its workers)
    When it starts
    Then only the latter changes the process's collector."""
    _run(
        f"""
        import asyncio

        from lambdaserve.processes.serve import with_lifespan
        from lambdaserve.serving.data_plane import InferenceDataPlane
        from lambdaserve.serving.readiness import Readiness

        before = gc.get_threshold()

        async def app(scope, receive, send):
            pass

        plane = InferenceDataPlane(lambda: None, None, Readiness())
        hosted = with_lifespan(app, plane, None, own_process={own_process})

        async def start():
            events = [{{"type": "lifespan.startup"}}]
            async def receive():
                if events:
                    return events.pop()
                await asyncio.sleep(3600)
            sent = []
            async def send(message):
                sent.append(message["type"])
            task = asyncio.ensure_future(hosted({{"type": "lifespan"}}, receive, send))
            while not sent:
                await asyncio.sleep(0.01)
            task.cancel()
            return sent

        assert asyncio.run(start()) == ["lifespan.startup.complete"]
        changed = gc.get_threshold() != before
        assert changed is {own_process}, (before, gc.get_threshold())
        """
    )
