"""Residency bounds of one process's loaded versions: a count (0: none), bytes (a version's
files, or its workers' resident memory where more), pinned (scaled) versions dropped last,
and a broken version (its workers kept crashing) loaded afresh."""

from __future__ import annotations

from dataclasses import dataclass

from lambdaserve.serving.residency.loaded_versions import LoadedVersions


@dataclass
class Model:
    name: str
    resident: int = 0
    broken: str = ""
    closed: bool = False
    device: str = "cpu"

    def memory_bytes(self) -> int:
        return self.resident

    def close(self) -> None:
        self.closed = True


def key(name: str) -> tuple[str, int, str]:
    return (name, 1, "fp")


def test_bytes_bound_residency_when_there_is_no_count_bound():
    """Given no count bound and 100 bytes, When versions of 40 bytes load, Then the least
    recently used leave once a third would pass 100."""
    loaded = LoadedVersions(0, max_bytes=100, resident=lambda: 0)
    models = {n: Model(n) for n in "abc"}
    for name in "abc":
        loaded.load(key(name), lambda n=name: models[n], size=40)
    assert [k[0] for k, _ in loaded.items()] == ["b", "c"] and models["a"].closed


def test_workers_resident_memory_counts_where_it_is_more_than_the_files():
    loaded = LoadedVersions(0, max_bytes=100, resident=lambda: 0)
    worker = Model("w", resident=90)
    loaded.load(key("w"), lambda: worker, size=1)
    loaded.load(key("x"), lambda: Model("x"), size=20)
    assert [k[0] for k, _ in loaded.items()] == ["x"] and worker.closed


def test_a_pinned_version_leaves_last():
    """Given two resident versions of which the older is pinned (scaled),
    When a third loads, Then the unpinned one leaves; with only pinned ones left to drop,
    the least recently used pinned one leaves."""
    loaded = LoadedVersions(2, pinned=lambda k: k[0] in {"p", "q"})
    loaded.load(key("p"), lambda: Model("p"))
    loaded.load(key("a"), lambda: Model("a"))
    loaded.load(key("b"), lambda: Model("b"))
    assert [k[0] for k, _ in loaded.items()] == ["p", "b"]
    loaded.load(key("q"), lambda: Model("q"))
    loaded.load(key("c"), lambda: Model("c"))
    assert [k[0] for k, _ in loaded.items()] == ["q", "c"]


def test_a_broken_version_is_built_again_on_its_next_load():
    """Given a loaded version whose workers broke, When it is loaded again, Then the broken
    one is closed and a fresh one is built (before: the broken one came back)."""
    loaded = LoadedVersions(4)
    first = Model("m")
    assert loaded.load(key("m"), lambda: first) is first
    first.broken = "its code crashed 5 times within 60 s"
    second = Model("m")
    assert loaded.load(key("m"), lambda: second) is second and first.closed


def test_an_ensemble_neither_counts_nor_leaves_to_make_room_for_its_steps():
    """Given a count of 2 and an ensemble over two steps (it holds no model of its own),
    When the steps load, the ensemble loads, and the steps are used again in turn,
    Then all three stay resident: the ensemble is not counted, and no step is pushed out
    for it (else each step would push out the next one it calls, load after load)."""
    loaded = LoadedVersions(2, resident=lambda: 0)
    models = {n: Model(n) for n in ("a", "b", "pipe")}
    for name in ("a", "b"):
        loaded.load(key(name), lambda n=name: models[n])
    loaded.load(key("pipe"), lambda: models["pipe"], counted=False)
    for name in ("a", "b", "a", "b"):
        loaded.load(key(name), lambda n=name: Model(f"{n} again"))
    assert sorted(k[0] for k, _ in loaded.items()) == ["a", "b", "pipe"]
    assert not any(model.closed for model in models.values())
    # and a third counted version still makes the least recently used one leave
    loaded.load(key("c"), lambda: Model("c"))
    assert sorted(k[0] for k, _ in loaded.items()) == ["b", "c", "pipe"] and models["a"].closed
