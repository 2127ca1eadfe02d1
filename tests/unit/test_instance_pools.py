"""Triton's instance_group count as a pool of instances, and its rate limiter: N executions
at once on N instances, resources held per execution, the lowest executions x priority first,
and Triton's refusals word for word when a resource is given short."""

from __future__ import annotations

import threading
from dataclasses import replace

import numpy as np
import pytest

from lambdaserve.config.instance_groups import RateLimits, Resource
from lambdaserve.config.model_config import build
from lambdaserve.errors import InvalidInput, LoadRefused
from lambdaserve.protocol.v2 import InferInput, InferRequest
from lambdaserve.serving.instances import InstancePool
from lambdaserve.serving.rate_limiter import RateLimiter, parse_resources
from lambdaserve.wiring.inference import build_model_server


class Gate:
    """A model whose runs wait at a gate: how many run at once is what the test reads."""

    device = "cpu"

    def __init__(self, log: list[str], name: str, release: threading.Event) -> None:
        self.log, self.name, self.release = log, name, release
        self.running = 0
        self.most = 0
        self.lock = threading.Lock()

    def run(self, inputs, outputs):
        with self.lock:
            self.log.append(self.name)
        self.release.wait(5)
        return {"y": np.zeros(1)}


def _threads(pool: InstancePool, n: int) -> list[threading.Thread]:
    threads = [threading.Thread(target=pool.run, args=({}, ["y"])) for _ in range(n)]
    for thread in threads:
        thread.start()
    return threads


def _wait(predicate, seconds: float = 5.0) -> None:
    done = threading.Event()
    for _ in range(int(seconds / 0.01)):
        if predicate():
            return
        done.wait(0.01)
    raise AssertionError("never happened")


def test_count_absent_takes_tritons_defaults_and_a_count_is_summed():
    """Given instance_group spellings, When built, Then Triton's counts: 2 for a KIND_CPU
    ONNX Runtime group without a count, 1 for KIND_GPU, the groups summed."""
    cpu = {"backend": "onnxruntime", "instance_group": [{"kind": "KIND_CPU"}]}
    assert build(cpu, "m").instance_count == 2
    gpu = {"backend": "onnxruntime", "instance_group": [{"kind": "KIND_GPU"}]}
    assert build(gpu, "m").instance_count == 1
    torch = {"backend": "pytorch", "instance_group": [{"kind": "KIND_CPU"}]}
    assert build(torch, "m").instance_count == 1
    summed = {"instance_group": [{"count": 3}, {"count": 2, "kind": "KIND_CPU"}]}
    assert build(summed, "m").instance_count == 5
    assert build({}, "m").instance_count == 1
    limited = {
        "instance_group": [
            {
                "rate_limiter": {
                    "resources": [{"name": "R1", "count": 4, "global": True}],
                    "priority": 2,
                }
            }
        ]
    }
    assert build(limited, "m").rate_limits == RateLimits((Resource("R1", 4, True),), 2)


def test_n_instances_run_n_executions_at_once_and_no_more():
    """Given a pool of 3 instances whose runs wait at a gate,
    When 5 runs are asked for at once,
    Then 3 run (one per instance), the other 2 once those end."""
    log: list[str] = []
    release = threading.Event()
    made = iter(range(10))
    pool = InstancePool(lambda: Gate(log, f"i{next(made)}", release), 3)
    threads = _threads(pool, 5)
    _wait(lambda: len(log) == 3)
    assert sorted(log) == ["i0", "i1", "i2"]
    release.set()
    for thread in threads:
        thread.join(5)
    assert len(log) == 5
    assert [i["id"] for i in pool.describe()] == ["9000", "9001", "9002"]


def test_scaling_a_pool_adds_and_drops_instances():
    """Given a pool of 1, When scaled to 3 then to 2, Then describe lists that many."""
    release = threading.Event()
    release.set()
    pool = InstancePool(lambda: Gate([], "x", release), 1)
    pool.scale(3)
    assert pool.instance_count == 3
    pool.scale(2)
    assert len(pool.describe()) == 2


def _limited(limiter: RateLimiter, key: str, log: list[str], gate: threading.Event):
    """A thread running one execution of ``key`` under the limiter, logged when it runs."""

    def one() -> None:
        with limiter.execution(key):
            log.append(key)
            gate.wait(5)

    thread = threading.Thread(target=one)
    thread.start()
    return thread


def test_an_instance_runs_only_when_its_global_resource_is_free():
    """Given two versions of 2 instances, each instance needing 3 of global R1, and
    --rate-limit-resource R1:4,
    When 4 executions are asked for,
    Then one runs at a time (two would need 6 > 4), each after the one before releases R1."""
    log: list[str] = []
    release = threading.Event()
    limiter = RateLimiter(parse_resources(["R1:4"]))
    needs = RateLimits((Resource("R1", 3, True),))
    limiter.register("a", 2, needs)
    limiter.register("b", 2, needs)
    threads = [_limited(limiter, key, log, release) for key in ("a", "a", "b", "b")]
    _wait(lambda: len(log) == 1)
    threading.Event().wait(0.2)  # the others stay waiting: R1 is held
    assert len(log) == 1
    release.set()
    for thread in threads:
        thread.join(5)
    assert sorted(log) == ["a", "a", "b", "b"]


def test_a_version_runs_no_more_executions_than_its_instances():
    """Given a version of 2 instances needing no resource, When 3 executions are asked for,
    Then 2 run at once."""
    log: list[str] = []
    release = threading.Event()
    limiter = RateLimiter()
    limiter.register("m", 2, None)
    threads = [_limited(limiter, "m", log, release) for _ in range(3)]
    _wait(lambda: len(log) == 2)
    threading.Event().wait(0.2)
    assert len(log) == 2
    release.set()
    for thread in threads:
        thread.join(5)
    assert len(log) == 3


def test_the_lowest_executions_times_priority_goes_first():
    """Given versions a (priority 1) and b (priority 4), one instance each, both needing
    all of R, a having run twice already,
    When both wait for R, held by a third version's execution,
    Then b goes first (0 executions x 4 = 0, below a's 2 x 1)."""
    log: list[str] = []
    hold, go = threading.Event(), threading.Event()
    limiter = RateLimiter()
    limiter.register("a", 1, RateLimits((Resource("R", 1, True),), 1))
    limiter.register("b", 1, RateLimits((Resource("R", 1, True),), 4))
    limiter.register("h", 1, RateLimits((Resource("R", 1, True),)))
    go.set()
    for _ in range(2):
        _limited(limiter, "a", [], go).join(5)  # a: 2 executions, weighted 2; b: 0
    go.clear()
    first = [_limited(limiter, "h", log, hold)]
    _wait(lambda: log == ["h"])
    waiting = [_limited(limiter, "a", log, go), _limited(limiter, "b", log, go)]
    _wait(lambda: len(limiter._waiting) == 2)
    hold.set()
    go.set()
    for thread in first + waiting:
        thread.join(5)
    assert log == ["h", "b", "a"]


def test_a_resource_given_short_refuses_the_version_with_tritons_reason():
    """Given --rate-limit-resource R1:2 and an instance needing 3 of R1,
    When it registers, Then LoadRefused with Triton's words; another version still loads."""
    limiter = RateLimiter(parse_resources(["R1:2"]))
    with pytest.raises(LoadRefused) as refused:
        limiter.register("big", 1, RateLimits((Resource("R1", 3),)))
    assert refused.value.message == (
        'Resource count for "R1" is limited to 2 which will prevent scheduling of one or more '
        "model instances, the minimum required count is 3"
    )
    limiter.register("small", 1, RateLimits((Resource("R1", 2),)))
    with pytest.raises(LoadRefused, match='Resource "R1" is present as both global'):
        limiter.register("mixed", 1, RateLimits((Resource("R1", 1, True),)))


def test_bad_resource_flags_say_how_to_write_them():
    """Given tritonserver's spellings and bad ones, Then parsed or InvalidInput."""
    assert parse_resources(["R1:10", "R2:5:0"]) == {("R1", "per-device"): 10, ("R2", "0"): 5}
    for bad in ("R1", "R1:x", ":3", "R1:3:gpu"):
        with pytest.raises(InvalidInput, match="rate-limit-resource"):
            parse_resources([bad])


def test_serve_and_dev_take_tritonservers_rate_limit_flags_into_the_environment():
    """Given `serve` and `dev` with tritonserver's spellings, When parsed, Then the settings
    every process reads carry them; a bad mode or resource is refused before any start."""
    from lambdaserve.cli import _parser
    from lambdaserve.processes.rate_limit_flags import rate_limit_env
    from lambdaserve.settings import Settings

    for command in ("serve", "dev"):
        flags = ["--rate-limit=execution_count", "--rate-limit-resource=R1:10"]
        args = _parser().parse_args([command, *flags, "--rate-limit-resource", "R2:5:0"])
        env = rate_limit_env(args)
        settings = Settings.from_env(env)
        assert (settings.rate_limit, settings.rate_limit_resources) == (
            "execution_count",
            ("R1:10", "R2:5:0"),
        )
    assert rate_limit_env(_parser().parse_args(["serve"])) == {}
    with pytest.raises(InvalidInput, match="execution_count or off"):
        rate_limit_env(_parser().parse_args(["serve", "--rate-limit", "always"]))


SLEEPER = b"""
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.5)
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.ones((1, 1), np.float32))])
            for _ in requests
        ]
"""
SLEEPER_CONFIG = b"""
backend: "python"
max_batch_size: 0
input [{ name: "IN", data_type: TYPE_FP32, dims: [ 1, 1 ] }]
output [{ name: "OUT", data_type: TYPE_FP32, dims: [ 1, 1 ] }]
instance_group [{ count: 2, kind: KIND_CPU,
                  rate_limiter { resources [{ name: "R1", count: 1 }] } }]
"""


def test_waiting_for_the_rate_limiters_resource_is_queue_time_not_compute(model_code_enabled):
    # Given a model of two instances each needing R1, of which serve has one (R1:1)
    aws = model_code_enabled
    aws.put("models/sleeper/config.pbtxt", SLEEPER_CONFIG)
    aws.put("models/sleeper/1/model.py", SLEEPER)
    aws.services.registrar.reconcile_model("sleeper")
    settings = replace(aws.settings, rate_limit="execution_count", rate_limit_resources=("R1:1",))
    server = build_model_server(settings, aws.clients)
    request = InferRequest((InferInput("IN", "FP32", (1, 1), np.ones((1, 1), np.float32)),))
    server.infer("sleeper", None, request, lambda _s, o: o)  # loaded, before it is counted
    before = server.stats.snapshot("sleeper")["model_stats"][0]["inference_stats"]
    # When two requests of half a second each come at once
    start = threading.Barrier(2)

    def call() -> None:
        start.wait()
        server.infer("sleeper", None, request, lambda _s, o: o)

    threads = [threading.Thread(target=call) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    after = server.stats.snapshot("sleeper")["model_stats"][0]["inference_stats"]
    # Then the one that waited for R1 counted its wait as queue, as Triton counts a request
    # queued until an instance is allocated, and compute_infer holds the two runs alone
    queued = after["queue"]["ns"] - before["queue"]["ns"]
    computed = after["compute_infer"]["ns"] - before["compute_infer"]["ns"]
    assert queued >= 0.3e9, (queued, computed)
    assert computed < 1.3e9, (queued, computed)  # the waiting counted in it: about 1.5 s
