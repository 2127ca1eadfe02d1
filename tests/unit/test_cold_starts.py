"""Each version's cold starts (metrics.cold_starts, catalog.cold_starts): a load writes its
phases, the version's first execution after it adds the first inference, every instance's
samples meet in the catalog, and describe's summary gives p50 and p99 per phase."""

from __future__ import annotations

import io
import json
import threading
from typing import Any

from lambdaserve.catalog.cold_starts import ColdStartStore
from lambdaserve.metrics.cold_starts import INIT, ColdStart, ColdStarts, process_age_ms, summary
from lambdaserve.metrics.emf import write_cold_start
from tests.support import wait_until

COLD = ColdStart(device="cpu", fetch_bytes=1000, fetch_ms=12.0, load_ms=30.0, warmup_ms=3.0)


def test_a_load_then_its_first_inference_make_one_sample():
    # Given a process's cold starts, written to a list
    written: list[tuple[str, int, str, dict[str, Any]]] = []
    starts = ColdStarts(lambda m, v, s, f: written.append((m, v, s, dict(f))), "server")
    # When a version loads, then executes twice
    starts.loaded("m", 1, COLD)
    starts.executed("m", 1, 2.5)
    starts.executed("m", 1, 9.0)
    # Then one sample got the load's phases, then its first inference (only the first)
    assert [(m, v) for m, v, _, _ in written] == [("m", 1), ("m", 1)]
    assert written[0][2] == written[1][2]
    assert written[0][3]["where"] == "server" and written[0][3]["fetch_bytes"] == 1000
    assert written[0][3]["total_ms"] == 45.0
    assert written[1][3] == {"first_inference_ms": 2.5, "total_ms": 47.5}


def test_a_failing_write_never_fails_the_load():
    def broken(*_: Any) -> None:
        raise RuntimeError("AccessDenied")

    starts = ColdStarts(broken, "infer function")
    starts.loaded("m", 1, COLD)  # logged, not raised
    starts.executed("m", 1, 1.0)


def test_every_instances_samples_meet_in_the_catalog_and_summarize(aws):
    # Given the catalog table, and three instances' cold starts of one version
    store = ColdStartStore(aws.clients.dynamodb, aws.settings.table)
    for n, (fetch, first) in enumerate(((10.0, 2.0), (20.0, 4.0), (90.0, 8.0))):
        store.put("m", 1, f"000{n}", {"where": "infer function", "device": "cpu",
                                       "fetch_bytes": 1000, "fetch_ms": fetch, "load_ms": 5.0,
                                       "warmup_ms": 0.0, "total_ms": fetch + 5.0})  # fmt: skip
        store.put("m", 1, f"000{n}", {"first_inference_ms": first})
    store.put("m", 2, "0009", {"where": "server", "fetch_ms": 1.0})
    # When describe summarizes version 1's
    samples = store.of("m", 1)
    described = summary(samples)
    # Then each phase has its p50 and p99 over the three, and version 2's stayed its own
    assert len(samples) == 3
    assert described["count"] == 3 and described["where"] == ["infer function"]
    assert described["fetchMs"] == {"p50": 20.0, "p99": 90.0}
    assert described["firstInferenceMs"] == {"p50": 4.0, "p99": 8.0}
    assert described["loadMs"] == {"p50": 5.0, "p99": 5.0}
    assert summary(store.of("m", 3)) == {}


def test_a_long_running_process_writes_on_a_thread_of_its_own():
    # Given a process's cold starts written in the background, the writer held until released
    release = threading.Event()
    written: list[str] = []

    def slow(model: str, version: int, sample: str, fields: Any) -> None:
        release.wait(10)
        written.append(threading.current_thread().name)

    starts = ColdStarts(slow, "server", background=True)
    # When a version loads
    starts.loaded("m", 1, COLD)  # returns at once: the test would hang otherwise
    # Then the write happens off the caller's thread
    assert written == []
    release.set()
    wait_until(lambda: written, 5)
    assert written[0].startswith("cold-starts")


def test_the_process_start_joins_the_first_load_only():
    # Given a process that became ready 120 ms after its interpreter started
    written: list[dict[str, Any]] = []
    starts = ColdStarts(lambda m, v, s, f: written.append(dict(f)), "infer function")
    starts.process_ready(INIT, 120.0)
    # When two versions load, one after the other
    starts.loaded("m", 1, COLD)
    starts.loaded("m", 2, COLD)
    # Then only the first load's cold start has the init, and its total counts it
    assert written[0]["init"] == "init" and written[0]["init_ms"] == 120.0
    assert written[0]["total_ms"] == 165.0
    assert "init_ms" not in written[1] and written[1]["total_ms"] == 45.0


def test_a_restore_starts_a_new_sample_for_each_version_the_snapshot_holds():
    # Given a version loaded before the snapshot (its first inference still to come)
    written: list[tuple[str, dict[str, Any]]] = []
    starts = ColdStarts(lambda m, v, s, f: written.append((s, dict(f))), "infer function")
    starts.loaded("m", 1, COLD)
    snapshot_sample = written[0][0]
    # When the instance is restored (8 ms of hooks), then answers
    starts.restored(8.0, [("m", 1)])
    starts.executed("m", 1, 2.0)
    # Then the restore is a sample of its own: restore, then first inference, no fetch
    restored_sample, fields = written[1]
    assert restored_sample != snapshot_sample
    assert fields["init"] == "restore" and fields["init_ms"] == 8.0 and "fetch_ms" not in fields
    assert written[2] == (restored_sample, {"first_inference_ms": 2.0, "total_ms": 10.0})
    assert summary([{**fields, **written[2][1], "sample": restored_sample}])["starts"] == [
        "restore"
    ]


def test_each_cold_start_is_also_an_emf_line():
    # Given cold starts that emit EMF lines to a stream
    stream = io.StringIO()
    starts = ColdStarts(lambda *_: None, "server", emit=write_cold_start("svc", stream))
    # When a version loads and runs once
    starts.loaded("m", 3, COLD)
    starts.executed("m", 3, 5.0)
    # Then two lines: the load's phases, then the first inference with the whole cold start
    load, first = (json.loads(line) for line in stream.getvalue().splitlines())
    directive = load["_aws"]["CloudWatchMetrics"][0]
    assert directive["Dimensions"][0] == ["model", "version", "service"]
    names = {m["Name"]: m["Unit"] for m in directive["Metrics"]}
    assert names["ColdStartFetchMs"] == "Milliseconds" and names["ColdStartFetchBytes"] == "Bytes"
    assert (load["model"], load["version"], load["ColdStartLoadMs"]) == ("m", "3", 30.0)
    assert first["ColdStartFirstInferenceMs"] == 5.0 and first["ColdStartMs"] == 50.0


def test_the_process_age_is_read_from_the_kernel():
    # Given this process, started before the test ran
    # When its age is read, Then it is positive and no older than the machine's uptime
    age = process_age_ms()
    assert age is not None and age > 0
    with open("/proc/uptime", encoding="ascii") as uptime:
        assert age <= float(uptime.read().split()[0]) * 1000
