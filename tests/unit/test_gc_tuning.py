"""`serve`'s garbage collector: a higher young threshold, and what lives after the warm-up
frozen out of the collector's passes."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from lambdaserve.processes.gc_tuning import YOUNG_THRESHOLD, tune_for_serving
from lambdaserve.serving.preload import Preloaded
from lambdaserve.serving.readiness import Readiness


@pytest.fixture
def restored_gc() -> Iterator[None]:
    """The test process's collector as it was, whatever the test did to it."""
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_serving_raises_the_young_threshold_and_freezes_once_ready(restored_gc):
    """Given a server still warming up
    When its collector is tuned, and then it becomes ready, drains, and would be ready again
    Then the young threshold is raised at once, nothing is frozen before ready, what was
    alive at ready is frozen then, and what comes later is not."""
    gc.unfreeze()
    readiness = Readiness()
    tune_for_serving(readiness)
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD
    assert gc.get_freeze_count() == 0
    kept: list[object] = []  # alive (and tracked) when the warm-up ends
    readiness.warmed(Preloaded((), (), 0))
    assert gc.get_freeze_count() > 0
    assert not _in_collected_generations(kept)  # frozen: the collector no longer walks it
    later: list[object] = []
    readiness.drain()
    assert _in_collected_generations(later)  # not frozen again


def _in_collected_generations(thing: object) -> bool:
    return any(candidate is thing for candidate in gc.get_objects())


def test_without_readiness_only_the_threshold_changes(restored_gc):
    """Given a process with no readiness (nothing says when it is warm)
    When its collector is tuned
    Then the young threshold is raised and nothing is frozen."""
    gc.unfreeze()
    tune_for_serving(None)
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD
    assert gc.get_freeze_count() == 0
