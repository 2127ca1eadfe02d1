"""TorchServe workflows and Paddle Serving pipelines in worker processes
(LAMBDASERVE_CODE_WORKERS=1): their user code (a workflow's function nodes, a pipeline's Ops)
runs in a worker, a workflow's model nodes cross back to the serving process, and a crash in
that code stays in its model: answered once, the worker restarted, other models untouched.
The answers are those the in-process tests compute by hand (test_torchserve_archives,
test_paddle_pipeline)."""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from lambdaserve.errors import InferenceError
from lambdaserve.runtimes.torchserve.handler import SIGNATURE as HANDLER_SIGNATURE
from lambdaserve.workers.worker_model import WorkerModel, WorkerSpec
from tests import builders
from tests.support import wait_until

WAIT_S = 120  # a worker imports numpy and lambdaserve (and a pipeline OpenVINO): slow
KILL_SELF = "os.kill(os.getpid(), signal.SIGKILL)"
ONNX_BODY = {
    "inputs": [{"name": "INPUT__0", "shape": [1, 4], "datatype": "FP32", "data": [0.1] * 4}]
}


@contextmanager
def another_model_keeps_answering(stack) -> Iterator[Callable[[], None]]:
    """An ONNX model asked over and over while the body runs; the check that every one of
    its requests answered, once it has answered a few."""
    stack.put("models/other/1/model.onnx", builders.onnx_mlp(4, 3))
    stack.wait_state("other", 1, "READY", timeout_s=WAIT_S)
    answered, failed, stop = [], [], threading.Event()

    def keep_asking() -> None:
        while not stop.is_set():
            answer = stack.inference.post("/v2/models/other/infer", json=ONNX_BODY, timeout=WAIT_S)
            (answered if answer.status_code == 200 else failed).append(answer.text)

    asker = threading.Thread(target=keep_asking)
    asker.start()

    def check() -> None:
        wait_until(lambda: len(answered) > 3, WAIT_S)
        stop.set()
        asker.join(WAIT_S)
        assert failed == []

    try:
        yield check
    finally:
        stop.set()
        asker.join(WAIT_S)


@pytest.mark.torch
def test_a_workflow_runs_in_its_worker_and_a_function_node_that_kills_it_is_restarted(
    stack,
    tmp_path,
):
    """Given tiny.mar and a .war (pre_processing -> tiny -> post_processing) whose
    pre_processing kills its own process, or hangs, when asked to (function nodes get 5 s),
    with workers on, and an ONNX model,
    When the workflow is asked, asked to crash, asked, asked to hang, asked,
    Then it answers as computed by hand (its model node ran in the serving process); the
    crash answers once naming SIGKILL; the hang answers the node's timeout and the worker
    still running it ends; each next request answers from a new worker; and every request
    of the ONNX model succeeded."""
    pytest.importorskip("ts")
    from tests.torchserve_archives import HANDLERS, archive, expected, workflow_archive

    source = tmp_path / "workflow"
    shutil.copytree(HANDLERS / "workflow", source)
    handler = source / "workflow_handler.py"
    text = handler.read_text()
    anchor = "    return [json.dumps"
    assert anchor in text
    crashing = f"    if body.get('crash'):\n        import os, signal\n        {KILL_SELF}\n"
    hanging = "    if body.get('hang'):\n        import os, pathlib, time\n"
    hanging += "        pathlib.Path(body['hang']).write_text(str(os.getpid()))\n"
    hanging += "        time.sleep(600)\n"
    handler.write_text(text.replace(anchor, crashing + hanging + anchor, 1))
    spec = (source / "spec.yaml").read_text()
    for old, new in (
        ("    retry-attempts: 1\n    timeout-ms: 20000\n", "    timeout-ms: 5000\n"),
        ("url: tiny.mar\n", "url: tiny.mar\n       retry-attempts: 1\n       timeout-ms: 20000\n"),
    ):
        assert old in spec
        spec = spec.replace(old, new)
    (source / "spec.yaml").write_text(spec)
    stack.put("models/tiny.mar", archive(tmp_path, "tiny").read_bytes())
    stack.put("models/pipeline.war", workflow_archive(tmp_path, source=source).read_bytes())
    stack.wait_state("tiny", 1, "READY", timeout_s=WAIT_S)
    stack.wait_state("pipeline", 1, "READY", timeout_s=WAIT_S)
    row = [0.25, 0.5, -2.0, 1.0]
    by_hand = expected(tmp_path, [row])[0]
    labels = ["cat", "dog", "bird"]
    wanted = {"label": labels[by_hand["class"]], "p": max(by_hand["probabilities"])}

    def ask(**extra: object):
        body = {"raw": row, **extra}
        return stack.inference.post("/wfpredict/pipeline", json=body, timeout=WAIT_S)

    with another_model_keeps_answering(stack) as check:
        first = ask()
        assert first.status_code == 200, first.text
        assert first.json() == wanted
        crashed = ask(crash=True)
        assert crashed.status_code >= 500
        assert "crashed" in crashed.text and "SIGKILL" in crashed.text, crashed.text
        again = ask()  # waits for the restarted worker
        assert again.status_code == 200, again.text
        assert again.json() == wanted
        holding = tmp_path / "holding"
        hung = ask(hang=str(holding))
        assert hung.status_code >= 500
        assert "'pre_processing' took over 5000 ms" in hung.text, hung.text
        wait_until(lambda: not _alive(int(holding.read_text())), WAIT_S)
        after = ask()
        assert after.status_code == 200, after.text
        assert after.json() == wanted
        check()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


PADDLE_ANCHOR = '        scale = float(input_dict.get("scale", "1"))'


@pytest.mark.openvino
def test_a_paddle_pipeline_runs_in_its_worker_and_an_op_that_kills_it_is_restarted(
    stack,
):
    """Given the Paddle pipeline fixture whose ScaleOp kills its own process when asked to,
    with workers on, and an ONNX model,
    When it is asked, asked for its product error and its raising Op, asked to crash, then
    asked again,
    Then it answers as Paddle computed it and as in-process (51 from preprocess, 10000 naming
    the Op), the crash answers once naming SIGKILL, the next request answers from a new
    worker, and every request of the ONNX model succeeded."""
    pytest.importorskip("openvino")
    from tests.integration import test_paddle_pipeline as paddle

    for path in sorted(paddle.PIPELINE.rglob("*")):
        if not path.is_file():
            continue
        body = path.read_bytes()
        if path.name == "web_service.py":
            text = body.decode()
            assert PADDLE_ANCHOR in text
            crash = '        if input_dict.get("crash"):\n            import os, signal\n'
            crash += f"            {KILL_SELF}\n"
            body = text.replace(PADDLE_ANCHOR, crash + PADDLE_ANCHOR, 1).encode()
        stack.put(f"models/{paddle.NAME}/1/{path.relative_to(paddle.PIPELINE).as_posix()}", body)
    for suffix in ("pdmodel", "pdiparams"):
        model = (paddle.FIXTURES / "paddle_mlp" / f"model.{suffix}").read_bytes()
        stack.put(f"models/{paddle.NAME}/1/mlp_model/inference.{suffix}", model)
    stack.wait_state(paddle.NAME, 1, "READY", timeout_s=WAIT_S)
    labels, scaled = paddle.by_hand(2.0)

    def answers_by_hand() -> None:
        answer = paddle.predict(stack, x=paddle.rows_text(), scale="2")
        assert answer["err_no"] == 0, answer
        assert json.loads(answer["value"][0]) == labels
        np.testing.assert_allclose(json.loads(answer["value"][1]), scaled, rtol=1e-5)

    with another_model_keeps_answering(stack) as check:
        answers_by_hand()
        refused = paddle.predict(stack, x=paddle.rows_text(), scale="-1")
        assert (refused["err_no"], refused["err_msg"]) == (51, "scale must be positive")
        broken = paddle.predict(stack, scale="1")
        assert broken["err_no"] == 10000 and "ClassName: MlpOp" in broken["err_msg"]
        crashed = stack.inference.post(
            f"/{paddle.NAME}/prediction",
            json={"key": ["x", "scale", "crash"], "value": [paddle.rows_text(), "2", "1"]},
            timeout=WAIT_S,
        )
        assert crashed.json()["err_no"] == 10000, crashed.text  # Paddle's UNKNOW, in-band
        assert "crashed" in crashed.text and "SIGKILL" in crashed.text, crashed.text
        answers_by_hand()  # waits for the restarted worker
        check()


RAISING = """
def handle(data, context):
    if data is None:
        return None
    if bytes(data[0]["body"]) == b"raise":
        raise ValueError("asked to raise")
    return [bytes(row["body"]).decode().upper() for row in data]
"""


def test_a_worker_whose_code_raised_serves_the_next_request(tmp_path: Path):
    """Given a handler in its one worker that raises when asked to,
    When it is asked to raise twice, then asked normally,
    Then each raise answers the handler's error at once and the same worker answers next
    (a raise does not leave the worker taken)."""
    version = tmp_path / "upper" / "1"
    version.mkdir(parents=True)
    (version / "handler.py").write_text(RAISING)
    model = WorkerModel(
        WorkerSpec(
            model="upper",
            version=1,
            backend="torchserve_handler",
            model_path=version / "handler.py",
            config={"name": "upper", "backend": "python"},
            signature=HANDLER_SIGNATURE.to_json(),
            start_timeout_s=WAIT_S,
        )
    )
    try:
        [first] = model.describe()
        for _ in range(2):
            with pytest.raises(InferenceError, match="asked to raise"):
                model.handle_rows([{"body": b"raise"}])
        [answer] = model.handle_rows([{"body": b"hello"}])
        assert answer.body == b"HELLO"
        [worker] = model.describe()
        assert worker["pid"] == first["pid"]
    finally:
        model.close()
