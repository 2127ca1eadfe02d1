"""Paddle pipelines: what publishing refuses (without running the user's code), and the DAG
executor's Paddle semantics (auto-batching, fan-in, error numbers, DAG shape)."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from lambdaserve.config.model_config import build
from lambdaserve.errors import ModelRejected
from lambdaserve.runtimes.paddle_serving import ops as paddle_ops
from lambdaserve.runtimes.paddle_serving.dag import PipelineExecutor, dag_order
from lambdaserve.runtimes.paddle_serving.ops import Op, PipelineRequest, PreparedPipeline, RequestOp
from lambdaserve.runtimes.paddle_serving.pipeline import PaddlePipelineRuntime

FIXTURES = Path(__file__).parents[1] / "fixtures"


def version_dir(tmp_path: Path) -> Path:
    target = tmp_path / "1"
    shutil.copytree(FIXTURES / "paddle_pipeline", target)
    for suffix in ("pdmodel", "pdiparams"):
        source = FIXTURES / "peer_models" / "paddle_mlp" / f"model.{suffix}"
        shutil.copy(source, target / "mlp_model" / f"inference.{suffix}")
    return target


def inspect(version: Path) -> None:
    PaddlePipelineRuntime().inspect(version / "web_service.py", build({}, "p"))


def test_publishing_reads_the_pipeline_without_running_it(tmp_path):
    pytest.importorskip("openvino")
    version = version_dir(tmp_path)
    inspect(version)  # the fixture passes
    # a web_service.py without its config.yml
    (version / "config.yml").rename(version / "other.yml")
    with pytest.raises(ModelRejected, match="needs its config.yml beside it"):
        inspect(version)
    (version / "other.yml").rename(version / "config.yml")
    # an op naming a folder the version does not have
    text = (version / "config.yml").read_text()
    (version / "config.yml").write_text(text.replace("model_config: mlp_model", "model_config: x"))
    with pytest.raises(ModelRejected, match="op 'mlp': model_config folder 'x'"):
        inspect(version)
    (version / "config.yml").write_text(text)
    # a Paddle 1.x model folder is Paddle Inference's, read at publish without paddle: a
    # program that is not one is refused saying so
    (version / "mlp_model" / "__model__").write_bytes(b"\x00")
    with pytest.raises(ModelRejected, match="op 'mlp': __model__ is not a Paddle inference"):
        inspect(version)


def test_a_web_service_is_not_run_at_publish(tmp_path):
    version = tmp_path / "1"
    version.mkdir()
    (version / "config.yml").write_text("op: {}\n")
    (version / "web_service.py").write_text(
        "raise SystemExit('ran')\n"
        "class S:\n    def get_pipeline_response(self, op):\n        pass\n"
    )
    inspect(version)  # outlined, never imported
    (version / "web_service.py").write_text("x = (\n")
    with pytest.raises(ModelRejected, match="web_service.py line"):
        inspect(version)


class Doubling:
    """A local model that doubles its feed, recording every call's rows."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def predict(self, feed, fetch=None, batch=True, log_id=0):
        self.calls.append(len(feed["x"]))
        return {"y": feed["x"] * 2}


class Rows(Op):
    def preprocess(self, input_dicts, data_id, log_id):
        ((_, data),) = input_dicts.items()
        return {"x": np.array([[float(data["x"])]])}, False, None, ""

    def postprocess(self, input_dicts, fetch_dict, data_id, log_id):
        return {"y": str(fetch_dict["y"].tolist())}, None, ""


def executor(section: dict, model: Doubling) -> PipelineExecutor:
    read = RequestOp()
    last = Rows(name="rows", input_ops=[read])
    prepared = PreparedPipeline(
        "p", paddle_ops.ResponseOp(input_ops=[last]), {"op": {"rows": section}}
    )
    return PipelineExecutor(prepared, lambda op, settings: model)


def test_requests_arriving_together_share_one_process_call(tmp_path):
    # Given an op with batch_size 4 (auto_batching_timeout long enough for all four)
    model = Doubling()
    section = {
        "batch_size": 4,
        "auto_batching_timeout": 10_000,
        "concurrency": 4,
        "local_service_conf": {"model_config": "m"},
    }
    pipeline = executor(section, model)
    answers: dict[int, str] = {}

    def call(i: int) -> None:
        answers[i] = pipeline.call(PipelineRequest(["x"], [str(i)])).value[0]

    # When four requests arrive at once
    threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    # Then the model ran once over their four rows, and each got its own row back
    assert model.calls == [4]
    assert answers == {i: str([[2.0 * i]]) for i in range(4)}


def test_a_lone_request_is_not_held_without_auto_batching_timeout():
    model = Doubling()
    section = {"batch_size": 8, "local_service_conf": {"model_config": "m"}}
    answer = executor(section, model).call(PipelineRequest(["x"], ["5"]))
    assert (answer.err_no, answer.value, model.calls) == (0, ["[[10.0]]"], [1])


def test_the_dag_starts_at_one_request_op_and_names_ops_once():
    read = RequestOp()
    a, b = Op(name="same", input_ops=[read]), Op(name="same", input_ops=[read])
    joined = Op(name="join", input_ops=[a, b])
    with pytest.raises(ValueError, match="two ops are named 'same'"):
        dag_order(PreparedPipeline("p", paddle_ops.ResponseOp([joined]), {}))
    orphan = Op(name="orphan")
    with pytest.raises(ValueError, match="exactly one RequestOp"):
        dag_order(PreparedPipeline("p", paddle_ops.ResponseOp([Op("x", [orphan])]), {}))


def test_a_fan_in_op_left_with_the_default_preprocess_says_to_override_it():
    read = RequestOp()
    a, b = Op(name="a", input_ops=[read]), Op(name="b", input_ops=[read])
    prepared = PreparedPipeline("p", paddle_ops.ResponseOp([Op(name="join", input_ops=[a, b])]), {})
    answer = PipelineExecutor(prepared, lambda op, s: None).call(PipelineRequest(["k"], ["v"]))
    assert answer.err_no == 3000 and "override preprocess" in answer.err_msg


class Rows2(Rows):
    """Rows whose width is the request's: feeds of two widths do not concatenate."""

    def preprocess(self, input_dicts, data_id, log_id):
        ((_, data),) = input_dicts.items()
        width = int(data["width"])
        return {"x": np.ones((1, width))}, False, None, ""


def test_a_batch_that_fails_answers_each_of_its_requests_and_the_op_serves_on():
    # Given an op that gathers two requests, whose feeds cannot be concatenated
    model = Doubling()
    read = RequestOp()
    last = Rows2(name="rows", input_ops=[read])
    section = {
        "batch_size": 2,
        "auto_batching_timeout": 10_000,
        "concurrency": 2,
        "local_service_conf": {"model_config": "m"},
    }
    prepared = PreparedPipeline("p", paddle_ops.ResponseOp([last]), {"op": {"rows": section}})
    pipeline = PipelineExecutor(prepared, lambda op, settings: model)
    answers: dict[int, int] = {}

    def call(width: int) -> None:
        answers[width] = pipeline.call(PipelineRequest(["width"], [str(width)])).err_no

    def together(*widths: int) -> None:
        threads = [threading.Thread(target=call, args=(w,)) for w in widths]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)

    together(2, 3)
    # Then both requests were answered with Paddle's UNKNOW, none left waiting
    assert answers == {2: 10000, 3: 10000}
    # And the op still answers the next pair (of one width)
    answers.clear()
    together(4, 4)
    assert answers == {4: 0}


def test_overrunning_tries_are_capped_then_time_out_at_once():
    from lambdaserve.runtimes.op_threads import ReusedThreads

    released = threading.Event()
    threads = ReusedThreads(cap=1)
    with pytest.raises(TimeoutError):
        threads.run(0.05, released.wait, (5,))
    # the one thread still runs the overrun: no second one is started
    started = threading.active_count()
    with pytest.raises(TimeoutError, match="still running"):
        threads.run(5, lambda: 1, ())
    assert threading.active_count() == started
    released.set()
    # the thread comes back once its call returns, and runs the next one
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            assert threads.run(1, lambda: 7, ()) == 7
            break
        except TimeoutError:
            time.sleep(0.02)
    else:
        raise AssertionError("the thread never came back")
    threads.close()
