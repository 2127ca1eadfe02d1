"""`serve --workers N`'s pieces without processes: the flag, /metrics summed over the
workers, and readiness once every worker is warm."""

from __future__ import annotations

import json
import os
import threading

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from lambdaserve import cli
from lambdaserve.metrics.prometheus import metrics_registry
from lambdaserve.metrics.shared import SummedMetrics, families_of
from lambdaserve.metrics.stats import Execution, StatsRegistry
from lambdaserve.processes.siblings import Siblings
from lambdaserve.processes.supervisor import replica_count, threads_per_replica
from tests.support import wait_until


def test_workers_auto_is_the_cores_this_process_may_run_on():
    """Given `--workers auto`, Then it is the size of the CPU affinity set."""
    assert replica_count("auto") == len(os.sched_getaffinity(0))
    assert replica_count("3") == 3


def test_workers_share_the_cores_out_as_model_threads_unless_told():
    """Given N workers and no LAMBDASERVE_INTRA_OP_THREADS, Then each worker's model threads
    are the cores divided among them (at least 1); Given the variable (even 0, the runtime's
    own choice), Then it is left as it is."""
    cores = len(os.sched_getaffinity(0))
    assert threads_per_replica({}, 1) == {"LAMBDASERVE_INTRA_OP_THREADS": str(cores)}
    assert threads_per_replica({}, cores) == {"LAMBDASERVE_INTRA_OP_THREADS": "1"}
    assert threads_per_replica({}, cores * 4) == {"LAMBDASERVE_INTRA_OP_THREADS": "1"}
    for told in ("0", "3"):
        assert threads_per_replica({"LAMBDASERVE_INTRA_OP_THREADS": told}, 2) == {}


@pytest.mark.parametrize("value", ["0", "-1", "many"])
def test_a_bad_worker_count_is_refused_saying_what_it_takes(value, capsys):
    """Given a count that is not 1 or more nor auto, Then serve exits 2 and says what fits."""
    with pytest.raises(SystemExit) as exit_:
        cli.main(["serve", "--workers", value])
    assert exit_.value.code == 2
    assert "--workers takes a number (1 or more) or auto" in capsys.readouterr().err


def test_a_scrape_sums_every_worker_and_counts_each_workers_successes(tmp_path):
    """Given this worker served 3 requests of mlp and another worker's file says 5 (and 2
    of a model this one never saw), When /metrics is scraped here, Then each series is the
    sum and the per-worker family names both pids."""
    own, other = StatsRegistry(), StatsRegistry()
    for registry, count in ((own, 3), (other, 5)):
        for _ in range(count):
            registry.record_success("mlp", 1, _execution())
    for _ in range(2):
        other.record_success("cnn", 1, _execution())
    (tmp_path / "metrics-4242.json").write_text(
        json.dumps(families_of(metrics_registry(lambda: other)))
    )
    summed = CollectorRegistry()
    summed.register(SummedMetrics(metrics_registry(lambda: own), lambda: tmp_path.glob("*")))

    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(generate_latest(summed).decode())
        for s in family.samples
    }

    success = "nv_inference_request_success"
    assert samples[(success, (("model", "mlp"), ("version", "1")))] == 8
    assert samples[(success, (("model", "cnn"), ("version", "1")))] == 2
    assert samples[("nv_inference_exec_count", (("model", "mlp"), ("version", "1")))] == 8
    per_worker = "lambdaserve_worker_inference_request_success"
    assert samples[(per_worker, (("worker", str(os.getpid())),))] == 3
    assert samples[(per_worker, (("worker", "4242"),))] == 7


def _execution() -> Execution:
    return Execution(requests=1, batch_size=1, queue_ns=10, input_ns=10, infer_ns=10, output_ns=10)


def test_a_warm_worker_reports_ready_only_once_every_sibling_is_warm(tmp_path):
    """Given two workers' shared directory, When worker 0 has warmed up, Then it waits (its
    marker written) until worker 1's marker appears too, and then goes on."""
    first, second = Siblings(tmp_path, 2, 0), Siblings(tmp_path, 2, 1)
    waiter = threading.Thread(target=first.warmed_then_wait, daemon=True)
    waiter.start()
    wait_until(lambda: first.ready_marker(0).exists())
    assert waiter.is_alive() and not first.all_ready()

    second.warmed_then_wait()  # the last one to warm up finds every marker and goes on

    waiter.join(60)
    assert not waiter.is_alive() and first.all_ready()
    assert first.ready_marker(1).read_text() == str(os.getpid())
