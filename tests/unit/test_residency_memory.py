"""Memory-aware residency (TF Serving's resource-preserving policy): each version's memory
measured at load, the least recently used versions evicted by size before a load so the new
one fits, and a version that can never fit refused with its size and the budget."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from lambdaserve.errors import ModelTooLarge
from lambdaserve.metrics.prometheus import metrics_registry
from lambdaserve.metrics.stats import StatsRegistry
from lambdaserve.serving.residency.loaded_versions import LoadedVersions

MB = 1024**2


class Process:
    """A process's resident set as the models it holds make it: a load adds its bytes, a
    close gives them back."""

    def __init__(self) -> None:
        self.rss = 300 * MB
        self.peak = self.rss

    def resident(self) -> int:
        return self.rss

    def allocate(self, size: int) -> None:
        self.rss += size
        self.peak = max(self.peak, self.rss)


@dataclass
class Model:
    name: str
    size: int
    process: Process
    closed: bool = False
    device: str = "cpu"

    def close(self) -> None:
        self.closed = True
        self.process.rss -= self.size


def key(name: str) -> tuple[str, int, str]:
    return (name, 1, "fp")


def loader(process: Process, name: str, size: int):
    def build() -> Model:
        process.allocate(size)
        return Model(name, size, process)

    return build


def test_a_version_whose_files_pass_the_budget_is_refused_before_it_loads():
    """Given a 64 MB budget, When a version of 100 MB of files is loaded, Then it is refused
    with its size and the budget, and nothing was built."""
    process = Process()
    loaded = LoadedVersions(0, max_bytes=64 * MB, resident=process.resident)
    with pytest.raises(ModelTooLarge) as refused:
        loaded.load(key("big"), loader(process, "big", 100 * MB), size=100 * MB)
    assert "big version 1 needs 100.0 MB of memory (its files)" in refused.value.message
    assert "residency budget of 64.0 MB" in refused.value.message
    assert "LAMBDASERVE_MAX_LOADED_BYTES" in refused.value.message
    assert process.rss == 300 * MB and list(loaded.items()) == []


def test_a_version_measured_larger_than_the_budget_is_closed_and_refused():
    """Given a 64 MB budget, When a version of 10 MB of files takes 80 MB once loaded, Then it
    is closed again and refused with the measured size; its next load is refused before it
    builds (its measured size is remembered)."""
    process = Process()
    loaded = LoadedVersions(0, max_bytes=64 * MB, resident=process.resident)
    with pytest.raises(ModelTooLarge, match=r"needs 80\.0 MB of memory \(measured at load\)"):
        loaded.load(key("big"), loader(process, "big", 80 * MB), size=10 * MB)
    assert process.rss == 300 * MB and list(loaded.items()) == []
    built = []
    with pytest.raises(ModelTooLarge, match="measured at its last load"):
        loaded.load(key("big"), lambda: built.append(1) or Model("big", 0, process), 10 * MB)
    assert built == []


def test_two_versions_that_fit_one_at_a_time_evict_each_other_before_loading():
    """Given a 100 MB budget and two versions of 60 MB (files of 1 MB: their size is known
    only once measured), When they are used in turn, Then each load first evicts the other,
    so the process never holds both (its peak stays one version above its base)."""
    process = Process()
    stats = StatsRegistry()
    loaded = LoadedVersions(
        0, max_bytes=100 * MB, resident=process.resident, on_memory=stats.record_memory
    )
    models = {}
    for name in ("a", "b"):
        models[name] = loaded.load(key(name), loader(process, name, 60 * MB), size=MB)
    # the first time, b's size was a guess (its files): a leaves once b is measured
    assert [k[0] for k, _ in loaded.items()] == ["b"] and models["a"].closed
    process.peak = process.rss
    for name in ("a", "b", "a"):
        models[name] = loaded.load(key(name), loader(process, name, 60 * MB), size=MB)
        assert [k[0] for k, _ in loaded.items()] == [name]
    # measured sizes known: the other left before the load, never both at once
    assert process.peak == 300 * MB + 60 * MB
    assert loaded.memory() == {("a", 1): 60 * MB}
    assert stats.memory() == {("a", 1): 60 * MB}


def test_versions_evicted_by_size_least_recently_used_first():
    """Given a 100 MB budget holding a (30 MB), b (30 MB), c (30 MB), used a, c, b in that
    order, When d (50 MB, measured before) loads, Then the least recently used leave until it
    fits: a and c, not b."""
    process = Process()
    loaded = LoadedVersions(0, max_bytes=100 * MB, resident=process.resident)
    sizes = {"a": 30 * MB, "b": 30 * MB, "c": 30 * MB, "d": 50 * MB}
    for name in ("d", "a", "b", "c", "a", "c", "b"):
        loaded.load(key(name), loader(process, name, sizes[name]), size=sizes[name])
    loaded.load(key("d"), loader(process, "d", sizes["d"]), size=sizes["d"])
    assert [k[0] for k, _ in loaded.items()] == ["b", "d"]


def test_the_count_stays_a_second_bound():
    """Given a byte budget that holds all three and a count of 2, When three load, Then the
    least recently used leaves for the count."""
    process = Process()
    loaded = LoadedVersions(2, max_bytes=1000 * MB, resident=process.resident)
    for name in "abc":
        loaded.load(key(name), loader(process, name, MB), size=MB)
    assert [k[0] for k, _ in loaded.items()] == ["b", "c"]


def test_memory_shows_in_stats_and_metrics_until_the_version_leaves():
    """Given a loaded version measured at 12 MB, Then its stats carry Triton's memory_usage
    and /metrics a gauge lambdaserve_model_memory_bytes; once unloaded, neither does."""
    process = Process()
    stats = StatsRegistry()
    loaded = LoadedVersions(
        4, max_bytes=0, resident=process.resident, on_memory=stats.record_memory
    )
    loaded.load(key("m"), loader(process, "m", 12 * MB), size=MB)
    [entry] = stats.snapshot("m")["model_stats"]
    assert entry["memory_usage"] == [{"type": "CPU", "id": 0, "byte_size": 12 * MB}]
    text = _exposition(stats)
    assert 'lambdaserve_model_memory_bytes{model="m",version="1"} 1.2582912e+07' in text
    loaded.unload("m")
    assert stats.snapshot("m")["model_stats"][0]["memory_usage"] == []
    assert 'lambdaserve_model_memory_bytes{model="m"' not in _exposition(stats)


def _exposition(stats: StatsRegistry) -> str:
    from lambdaserve.metrics.prometheus import exposition

    return exposition(metrics_registry(lambda: stats)).decode()


def test_the_budget_is_sized_from_the_functions_or_the_tasks_memory(tmp_path):
    """Given a 2048 MB function, a task whose cgroup allows 1 GiB, or a setting, Then the
    budget is three quarters less 256 MB (at least a quarter), the cgroup's, or the setting;
    no limit anywhere: no byte bound."""
    from lambdaserve.settings import Settings, memory_limit, resident_budget

    function = {"AWS_LAMBDA_FUNCTION_NAME": "infer", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "2048"}
    assert Settings.from_env(function).max_loaded_bytes == 1536 * MB - 256 * MB
    assert resident_budget(512 * MB) == 128 * MB and resident_budget(0) == 0
    said = {**function, "LAMBDASERVE_MAX_LOADED_BYTES": "0"}
    assert Settings.from_env(said).max_loaded_bytes == 0
    (tmp_path / "memory.max").write_text(f"{1024 * MB}\n")
    assert memory_limit(tmp_path) == 1024 * MB
    (tmp_path / "memory.max").write_text("max\n")
    assert memory_limit(tmp_path) == 0
    v1 = tmp_path / "v1" / "memory"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "no limit"
    assert memory_limit(tmp_path / "v1") == 0


def test_a_load_collects_garbage_only_after_a_version_left(monkeypatch: pytest.MonkeyPatch):
    # Given versions loaded in a process whose full collections are counted
    collections: list[int] = []
    monkeypatch.setattr("gc.collect", lambda *_: collections.append(1) or 0)
    process = Process()
    loaded = LoadedVersions(0, max_bytes=40 * MB, resident=process.resident)
    # When the first two load, with nothing released before them
    loaded.load(key("a"), loader(process, "a", 16 * MB), 16 * MB)
    loaded.load(key("b"), loader(process, "b", 16 * MB), 16 * MB)
    # Then no full collection ran (in a fresh Lambda instance one cost its first request 52 ms)
    assert collections == []
    # When a third needs room, so the least recently used leaves
    loaded.load(key("c"), loader(process, "c", 16 * MB), 16 * MB)
    # Then the one that left was collected as it left
    assert len(collections) >= 1
