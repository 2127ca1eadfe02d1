from __future__ import annotations

import hashlib
import multiprocessing
import threading
import time
from pathlib import Path

import pytest

from lambdaserve.errors import ModelNotReady
from lambdaserve.serving.cache import ArtifactCache, CachedFile


class FakeBucket:
    """Objects by key; counts fetches; can fail a download halfway (a crash mid-write)."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects = objects
        self.fetches: list[str] = []
        self.crash_next = False
        self._lock = threading.Lock()

    def fetch(self, key: str, path: Path) -> None:
        with self._lock:
            self.fetches.append(key)
        data = self.objects[key]
        if self.crash_next:
            self.crash_next = False
            path.write_bytes(data[: len(data) // 2])
            raise ConnectionError("connection reset mid-download")
        path.write_bytes(data)


def entry(path: str, key: str, data: bytes) -> CachedFile:
    return CachedFile(path, key, hashlib.sha256(data).hexdigest(), len(data))


@pytest.fixture
def bucket():
    return FakeBucket(
        {"m/1/model.onnx": b"A" * 1000, "m/1/w.bin": b"B" * 500, "n/1/model.onnx": b"C" * 800}
    )


def test_a_version_directory_holds_its_files_at_their_paths(tmp_path, bucket):
    cache = ArtifactCache(tmp_path, 10_000, bucket.fetch)
    files = [
        entry("model.onnx", "m/1/model.onnx", b"A" * 1000),
        entry("data/w.bin", "m/1/w.bin", b"B" * 500),
    ]
    view = cache.materialize(files)
    assert (view / "model.onnx").read_bytes() == b"A" * 1000
    assert (view / "data/w.bin").read_bytes() == b"B" * 500
    assert cache.materialize(files) == view
    assert len(bucket.fetches) == 2


def test_concurrent_loads_of_the_same_model_download_once(tmp_path, bucket):
    files = [entry("model.onnx", "m/1/model.onnx", b"A" * 1000)]
    caches = [ArtifactCache(tmp_path, 10_000, bucket.fetch) for _ in range(8)]  # as 8 processes
    barrier = threading.Barrier(8)
    views = []

    def load(cache: ArtifactCache) -> None:
        barrier.wait()
        views.append(cache.materialize(files))

    threads = [threading.Thread(target=load, args=(c,)) for c in caches]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert bucket.fetches == ["m/1/model.onnx"]
    assert len(set(views)) == 1


def test_a_corrupted_cached_file_is_detected_and_fetched_again(tmp_path, bucket):
    files = [entry("model.onnx", "m/1/model.onnx", b"A" * 1000)]
    view = ArtifactCache(tmp_path, 10_000, bucket.fetch).materialize(files)
    (view / "model.onnx").write_bytes(b"X" * 1000)  # bit rot, or a bad neighbour process
    fresh_process = ArtifactCache(tmp_path, 10_000, bucket.fetch)
    view = fresh_process.materialize(files)
    assert (view / "model.onnx").read_bytes() == b"A" * 1000
    assert len(bucket.fetches) == 2


def test_a_crash_mid_download_leaves_nothing_servable(tmp_path, bucket):
    cache = ArtifactCache(tmp_path, 10_000, bucket.fetch)
    files = [entry("model.onnx", "m/1/model.onnx", b"A" * 1000)]
    bucket.crash_next = True
    with pytest.raises(ConnectionError):
        cache.materialize(files)
    assert list((tmp_path / "blobs").glob("*")) == [
        tmp_path / "blobs" / (files[0].sha256 + ".lock")
    ]
    assert (cache.materialize(files) / "model.onnx").read_bytes() == b"A" * 1000


def test_content_that_changed_since_validation_is_not_served(tmp_path, bucket):
    cache = ArtifactCache(tmp_path, 10_000, bucket.fetch)
    stale = CachedFile("model.onnx", "m/1/model.onnx", hashlib.sha256(b"old").hexdigest(), 3)
    with pytest.raises(ModelNotReady, match="changed since it was validated"):
        cache.materialize([stale])
    assert cache.bytes_used() == 0


def test_eviction_keeps_the_budget_and_drops_the_least_recently_used(tmp_path, bucket):
    cache = ArtifactCache(tmp_path, 2000, bucket.fetch)
    first = [entry("model.onnx", "m/1/model.onnx", b"A" * 1000)]
    second = [entry("model.onnx", "n/1/model.onnx", b"C" * 800)]
    third = [entry("w.bin", "m/1/w.bin", b"B" * 500)]
    cache.materialize(first)
    cache.materialize(second)
    assert cache.bytes_used() == 1800
    cache.materialize(third)  # 2300 > 2000: the oldest (first) goes
    assert cache.bytes_used() == 1300
    assert not (tmp_path / "blobs" / first[0].sha256).exists()
    assert (cache.materialize(first) / "model.onnx").read_bytes() == b"A" * 1000
    assert cache.bytes_used() <= 2000


def _fetch_and_count(key: str, path: Path) -> None:
    """A fetch for child processes: appends one line per download to a shared log."""
    log = path.parent.parent / "fetches.log"
    with log.open("a") as handle:
        handle.write(key + "\n")
    time.sleep(0.2)  # a slow download, so the others arrive while it runs
    path.write_bytes(b"A" * 1000)


def _materialize_in_a_process(root: str, queue) -> None:
    cache = ArtifactCache(Path(root), 10_000, _fetch_and_count)
    view = cache.materialize([entry("model.onnx", "m/1/model.onnx", b"A" * 1000)])
    queue.put((view / "model.onnx").read_bytes() == b"A" * 1000)


def test_concurrent_processes_download_once(tmp_path):
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    processes = [
        context.Process(target=_materialize_in_a_process, args=(str(tmp_path), queue))
        for _ in range(4)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(60)
    assert [queue.get(timeout=5) for _ in processes] == [True] * 4
    assert (tmp_path / "fetches.log").read_text().splitlines() == ["m/1/model.onnx"]


def test_leftovers_of_a_killed_download_are_cleaned_on_start(tmp_path, bucket):
    # Given the files a process killed mid-download leaves: a partial blob and a staging view
    cache = ArtifactCache(tmp_path, 10_000, bucket.fetch)
    sha = hashlib.sha256(b"A" * 1000).hexdigest()
    partial = tmp_path / "blobs" / f"{sha}.0123.part"
    partial.write_bytes(b"A" * 400)
    in_flight = tmp_path / "blobs" / f"{sha}.4567.part.a1B2c3D4"  # boto3's temporary name
    in_flight.write_bytes(b"A" * 300)
    staging = tmp_path / "views" / "abcd.0123.tmp"
    (staging / "sub").mkdir(parents=True)
    (staging / "sub" / "model.onnx").write_bytes(b"A" * 100)
    # When a new process opens the cache
    fresh = ArtifactCache(tmp_path, 10_000, bucket.fetch)
    # Then they are gone, and the freed bytes are counted
    assert not partial.exists() and not in_flight.exists() and not staging.exists()
    assert fresh.clean_leftovers() == 0
    assert cache.bytes_used() == 0


def test_a_download_in_progress_elsewhere_is_left_alone(tmp_path, bucket):
    from filelock import FileLock

    ArtifactCache(tmp_path, 10_000, bucket.fetch)
    sha = hashlib.sha256(b"A" * 1000).hexdigest()
    partial = tmp_path / "blobs" / f"{sha}.0123.part"
    partial.write_bytes(b"A" * 400)
    # Given a live writer holding the blob's lock (another process or thread)
    with FileLock(str(tmp_path / "blobs" / f"{sha}.lock")):
        held = threading.Thread(
            target=lambda: ArtifactCache(tmp_path, 10_000, bucket.fetch), daemon=True
        )
        held.start()
        held.join(10)
        # Then its partial file survives a new process's cleanup
        assert partial.exists()
    assert ArtifactCache(tmp_path, 10_000, bucket.fetch).clean_leftovers() == 0
    assert not partial.exists()


def test_a_completed_blob_takes_its_orphaned_partials_with_it(tmp_path, bucket):
    # Given a partial download of a blob that a killed process left while this one runs
    cache = ArtifactCache(tmp_path, 10_000, bucket.fetch)
    body = bucket.objects["m/1/model.onnx"]
    sha = hashlib.sha256(body).hexdigest()
    orphan = tmp_path / "blobs" / f"{sha}.89ab.part.Zz9Yy8Xx"
    orphan.write_bytes(body[:500])
    # When the same blob is downloaded to completion
    cache.materialize([entry("model.onnx", "m/1/model.onnx", body)])
    # Then the orphan is gone: nothing outside the LRU budget stays on disk
    assert not orphan.exists()
    assert sorted(p.name for p in (tmp_path / "blobs").iterdir() if "lock" not in p.name) == [sha]
