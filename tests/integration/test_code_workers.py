"""Model code in worker processes, with real children: tensors cross by shared memory, a
crash or a hang stays in its model, the worker is restarted, describe and scaling see real
processes, and a version's own environment is first on its workers' path."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import numpy as np
import pytest

from lambdaserve.config.model_config import ModelConfig
from lambdaserve.errors import ModelCodeCrashed, ModelCodeFailed, ModelCodeTimedOut
from lambdaserve.runtimes.torchserve.handler import SIGNATURE as HANDLER_SIGNATURE
from lambdaserve.tensors.signature import Signature, TensorSpec
from lambdaserve.workers.worker_model import WorkerModel, WorkerSpec
from tests.support import wait_until

WAIT_S = 120  # a child imports numpy and lambdaserve: slow on a loaded machine

PYTHON_MODEL = """
import os, time
from pathlib import Path
import numpy as np
import triton_python_backend_utils as pb_utils
{imports}

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if x.size and x.flat[0] == -1:  # hold the request, saying which process has it
                Path(__file__).with_name("holding").write_text(str(os.getpid()))
                time.sleep(600)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", {output})]))
        return responses
"""
SIGNATURE = Signature(
    inputs=(TensorSpec("INPUT0", "FP32", (-1,)),), outputs=(TensorSpec("OUTPUT0", "FP32", (-1,)),)
)


def python_model(
    directory: Path, name: str, *, imports: str = "", output: str = "x * 2", **spec
) -> WorkerModel:
    version = directory / name / "1"
    version.mkdir(parents=True)
    (version / "model.py").write_text(PYTHON_MODEL.format(imports=imports, output=output))
    config = ModelConfig(name, backend="python", inputs=SIGNATURE.inputs, outputs=SIGNATURE.outputs)
    return WorkerModel(
        WorkerSpec(
            model=name,
            version=1,
            backend="python",
            model_path=version / "model.py",
            config=config.to_triton_json(),
            signature=SIGNATURE.to_json(),
            start_timeout_s=WAIT_S,
            **spec,
        )
    )


def double(model: WorkerModel, values: list[float]) -> list[float]:
    return model.run({"INPUT0": np.array(values, np.float32)}, ["OUTPUT0"])["OUTPUT0"].tolist()


def test_a_worker_killed_mid_request_fails_that_request_once_and_is_restarted(tmp_path):
    """Given two Python models in workers, one of them holding a request,
    When its worker is killed with SIGKILL while the other model keeps answering,
    Then the held request fails once with the crash (the signal named), a new worker
    answers the next request, and every request of the other model succeeded."""
    holder = python_model(tmp_path, "holder")
    other = python_model(tmp_path, "other", output="x + 1")
    try:
        failures, answered, stop = [], [], threading.Event()

        def keep_asking() -> None:
            while not stop.is_set():
                try:
                    assert double(other, [1.0, 2.0]) == [2.0, 3.0]
                    answered.append(1)
                except Exception as exc:
                    failures.append(exc)

        asker = threading.Thread(target=keep_asking)
        asker.start()
        outcome: list[BaseException] = []

        def held() -> None:
            try:
                double(holder, [-1.0])
            except Exception as exc:
                outcome.append(exc)

        request = threading.Thread(target=held)
        request.start()
        pid_file = tmp_path / "holder" / "1" / "holding"
        wait_until(pid_file.exists, WAIT_S)
        first_pid = int(pid_file.read_text())
        os.kill(first_pid, signal.SIGKILL)
        request.join(WAIT_S)

        [error] = outcome
        assert isinstance(error, ModelCodeCrashed)
        assert "crashed" in error.message and "SIGKILL" in error.message
        assert double(holder, [3.0]) == [6.0]  # waits for the restarted worker
        [worker] = holder.describe()
        assert worker["pid"] != first_pid and worker["status"] == "READY"
        wait_until(lambda: len(answered) > 3, WAIT_S)
        stop.set()
        asker.join(WAIT_S)
        assert failures == []
    finally:
        holder.close()
        other.close()


def test_an_idle_worker_that_dies_is_replaced_before_any_request(tmp_path):
    """Given a Python model's worker waiting for requests,
    When it is killed with SIGKILL,
    Then a new worker process takes its place without a request asking, and answers."""
    model = python_model(tmp_path, "idle")
    try:
        [first] = model.describe()
        os.kill(first["pid"], signal.SIGKILL)
        [second] = wait_until(
            lambda: [w for w in model.describe() if w["pid"] != first["pid"]], WAIT_S
        )
        assert second["status"] == "READY"
        assert double(model, [2.0]) == [4.0]
    finally:
        model.close()


DECOUPLED = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            sender = request.get_response_sender()
            for step in range(int(x.flat[0])):
                out = pb_utils.Tensor("OUTPUT0", np.full(3, step, np.float32))
                sender.send(pb_utils.InferenceResponse([out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


def test_a_decoupled_models_responses_stream_back_from_its_worker(tmp_path):
    """Given a decoupled Python model in a worker, sending one response per step,
    When it is asked for 4 steps, then for 50 of which the caller reads 2,
    Then the 4 responses come back in order; the abandoned stream's worker is replaced,
    not counted as a crash, and the next request answers."""
    version = tmp_path / "steps" / "1"
    version.mkdir(parents=True)
    (version / "model.py").write_text(DECOUPLED)
    config = ModelConfig(
        "steps",
        backend="python",
        inputs=SIGNATURE.inputs,
        outputs=SIGNATURE.outputs,
        decoupled=True,
    )
    model = WorkerModel(
        WorkerSpec(
            model="steps",
            version=1,
            backend="python",
            model_path=version / "model.py",
            config=config.to_triton_json(),
            signature=SIGNATURE.to_json(),
            start_timeout_s=WAIT_S,
            decoupled=True,
        )
    )
    try:
        asked = {"INPUT0": np.array([4.0], np.float32)}
        got = [a["OUTPUT0"].tolist() for a in model.stream(asked, ["OUTPUT0"])]
        assert got == [[float(step)] * 3 for step in range(4)]
        [first] = model.describe()
        many = model.stream({"INPUT0": np.array([50.0], np.float32)}, ["OUTPUT0"])
        assert [next(many)["OUTPUT0"][0] for _ in range(2)] == [0.0, 1.0]
        many.close()  # the caller goes away mid-stream
        [second] = wait_until(
            lambda: [w for w in model.describe() if w["pid"] != first["pid"]], WAIT_S
        )
        assert second["status"] == "READY"
        got = [a["OUTPUT0"].tolist() for a in model.stream(asked, ["OUTPUT0"])]
        assert len(got) == 4 and not model.broken
    finally:
        model.close()


HANDLER = """
import time

def handle(data, context):
    if data is None:
        return None
    body = data[0].get("body")
    if body == b"sleep" or body == bytearray(b"sleep"):
        time.sleep(600)
    return [bytes(row["body"]).decode().upper() for row in data]
"""


def handler_model(directory: Path, name: str, yaml: str = "") -> WorkerModel:
    version = directory / name / "1"
    version.mkdir(parents=True)
    (version / "handler.py").write_text(HANDLER)
    if yaml:
        (version / "model-config.yaml").write_text(yaml)
    from lambdaserve.workers.options import WorkerOptions, counts_for

    counts = counts_for("torchserve_handler", version / "handler.py", 1, WorkerOptions())
    return WorkerModel(
        WorkerSpec(
            model=name,
            version=1,
            backend="torchserve_handler",
            model_path=version / "handler.py",
            config=ModelConfig(name).to_triton_json(),
            signature=HANDLER_SIGNATURE.to_json(),
            min_workers=counts.min_workers,
            max_workers=counts.max_workers,
            timeout_s=counts.timeout_s,
            start_timeout_s=WAIT_S,
        )
    )


def test_a_handler_past_its_response_timeout_is_killed_and_the_next_request_answers(tmp_path):
    """Given a TorchServe handler whose model-config.yaml sets responseTimeout: 3,
    When a request makes it sleep past that,
    Then the request answers a timeout, its worker is killed and replaced, and the next
    request answers from a new process."""
    model = handler_model(tmp_path, "sleepy", "responseTimeout: 3\n")
    try:
        [before] = model.describe()
        with pytest.raises(ModelCodeTimedOut, match="timeout of 3 s"):
            model.handle_rows([{"body": bytearray(b"sleep")}])
        [answer] = model.handle_rows([{"body": bytearray(b"hello")}])
        assert answer.body == b"HELLO"
        [after] = model.describe()
        assert after["pid"] != before["pid"]
    finally:
        model.close()


def test_describe_shows_live_workers_and_scaling_changes_their_count(tmp_path):
    """Given a handler whose model-config.yaml asks for minWorkers 2,
    When it is described, scaled to 3 and then to 1,
    Then describe lists 2, 3 and 1 running workers with their pids and memory."""
    model = handler_model(tmp_path, "scaled", "minWorkers: 2\nmaxWorkers: 4\n")
    try:
        workers = wait_until(lambda: len(w := model.describe()) == 2 and w, WAIT_S)
        for worker in workers:
            assert worker["status"] == "READY" and worker["memoryUsage"] > 1_000_000
            assert Path(f"/proc/{worker['pid']}").exists()
        model.scale(3)
        wait_until(lambda: len(model.describe()) == 3, WAIT_S)
        model.scale(1)
        [kept] = wait_until(lambda: len(w := model.describe()) == 1 and w, WAIT_S)
        [answer] = model.handle_rows([{"body": b"x"}])
        assert answer.body == b"X"
        assert kept["pid"] in {w["pid"] for w in model.describe()}
    finally:
        model.close()


def test_a_worker_imports_from_its_python_paths_first(tmp_path):
    """Given a directory holding a package the serving environment does not have,
    When a Python model that imports it starts with that directory in python_paths,
    Then it loads and answers with the package's value; without it, the load fails."""
    site = tmp_path / "env"
    (site / "only_in_my_env").mkdir(parents=True)
    (site / "only_in_my_env" / "__init__.py").write_text("FACTOR = 5\n")
    imports = "import only_in_my_env"
    output = "x * only_in_my_env.FACTOR"
    model = python_model(
        tmp_path / "a", "env_model", imports=imports, output=output, python_paths=(site,)
    )
    try:
        assert double(model, [1.0, 2.0]) == [5.0, 10.0]
    finally:
        model.close()
    with pytest.raises(ModelCodeFailed, match="only_in_my_env"):
        python_model(tmp_path / "b", "env_model", imports=imports, output=output)
