"""Truth after failure: a version whose code crashed into UNAVAILABLE answers again once a
load, an unload + load, a re-upload or a reconcile recovers it (fresh workers, not the old
crash count), and a load or unload that answered 200 is what the inference side says at once.
"""

from __future__ import annotations

import httpx

from tests.integration.conftest import Stack

WAIT_S = 120
# Crashes only when asked to (INPUT0 < 0): a recovered version must then answer the rest.
CRASHING_ON_ASK = """
import os, signal
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        answers = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if data[0] < 0:
                os.kill(os.getpid(), signal.SIGSEGV)
            out = pb_utils.Tensor("OUTPUT0", data * 2)
            answers.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return answers
"""
CONFIG = """
backend: "python"
input [{ name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] }]
output [{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] }]
"""


def body(value: float) -> dict[str, object]:
    return {"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP32", "data": [value]}]}


def crash_into_unavailable(stack: Stack) -> None:
    for _ in range(5):
        answer = stack.inference.post("/v2/models/crasher/infer", json=body(-1), timeout=WAIT_S)
        assert answer.status_code == 500 and "SIGSEGV" in answer.json()["error"], answer.text
    reason = stack.wait_state("crasher", 1, "UNAVAILABLE", timeout_s=WAIT_S)
    assert "crashed 5 times" in reason
    refused = stack.inference.post("/v2/models/crasher/infer", json=body(1), timeout=WAIT_S)
    assert refused.status_code == 503, refused.text


def answers(inference: httpx.Client) -> None:
    ready = inference.get("/v2/models/crasher/ready")
    assert ready.status_code == 200, ready.text
    answer = inference.post("/v2/models/crasher/infer", json=body(1.5), timeout=WAIT_S)
    assert answer.status_code == 200, answer.text
    assert answer.json()["outputs"][0]["data"] == [3.0]


def test_a_crash_looped_version_answers_after_each_way_of_recovering_it(stack):
    """Given a Python model crashed five times into UNAVAILABLE,
    When it is recovered by a load, by an unload + load, by a re-upload of the same bytes,
    and by a reconcile,
    Then each time ready says 200 right after and a request is answered by fresh workers
    (before: READY, and every request 503 'its code crashed 5 times')."""
    stack.put("models/crasher/config.pbtxt", CONFIG.encode())
    stack.put("models/crasher/1/model.py", CRASHING_ON_ASK.encode())
    stack.wait_state("crasher", 1, "READY", timeout_s=WAIT_S)
    answers(stack.inference)

    crash_into_unavailable(stack)
    scaled = stack.api.put("/models/crasher?min_worker=1&synchronous=true", timeout=WAIT_S)
    assert scaled.status_code == 503 and "crashed 5 times" in scaled.text, scaled.text
    loaded = stack.api.post("/v2/repository/models/crasher/load", timeout=WAIT_S)
    assert loaded.status_code == 200, loaded.text
    answers(stack.inference)

    crash_into_unavailable(stack)
    assert stack.api.post("/v2/repository/models/crasher/unload").status_code == 200
    assert stack.api.post("/v2/repository/models/crasher/load", timeout=WAIT_S).status_code == 200
    answers(stack.inference)

    crash_into_unavailable(stack)
    stack.put("models/crasher/1/model.py", CRASHING_ON_ASK.encode())
    stack.wait_state("crasher", 1, "READY", timeout_s=WAIT_S)
    answers(stack.inference)

    crash_into_unavailable(stack)
    stack.services.registrar.reconcile_all()
    answers(stack.inference)


def test_ready_and_infer_follow_a_load_or_unload_at_once(stack):
    """Given a READY Python model,
    When it is unloaded, then loaded, on the repository API,
    Then right after each 200 (no wait for the catalog's refresh) ready and infer say
    the same: not ready and refused after the unload, ready and answering after the load."""
    stack.put("models/crasher/config.pbtxt", CONFIG.encode())
    stack.put("models/crasher/1/model.py", CRASHING_ON_ASK.encode())
    stack.wait_state("crasher", 1, "READY", timeout_s=WAIT_S)
    answers(stack.inference)
    for _ in range(3):
        assert stack.api.post("/v2/repository/models/crasher/unload").status_code == 200
        assert stack.inference.get("/v2/models/crasher/ready").status_code != 200
        refused = stack.inference.post("/v2/models/crasher/infer", json=body(1))
        assert refused.status_code in (400, 503), refused.text
        assert stack.process.server().residency.loaded_versions() == []  # unload frees it
        loaded = stack.api.post("/v2/repository/models/crasher/load", timeout=WAIT_S)
        assert loaded.status_code == 200, loaded.text
        answers(stack.inference)


CHATTY_CRASH = """
import logging, os, sys
import triton_python_backend_utils as pb_utils

logger = logging.getLogger("chatty")


class TritonPythonModel:
    def initialize(self, args):
        print("loading weights from /srv/secret/weights/big.bin", flush=True)
        logger.info("model ready in /srv/secret/cache after 3 s")

    def execute(self, requests):
        print("executing a batch", flush=True)
        sys.stderr.write("RuntimeError: CUDA out of memory in /srv/secret/lib/kernels.py\\n")
        sys.stderr.flush()
        os._exit(3)
"""


def test_a_crash_says_how_it_ended_and_the_codes_own_error_without_chatter_or_paths(stack, caplog):
    """Given a Python model that chats at start-up, then prints an error and exits 3,
    When a request makes it crash, five times,
    Then the client and the version's reason get the exit status and the code's error with
    the path cut to its file name, none of the chatter; the log has every line."""
    stack.put("models/chatty/config.pbtxt", CONFIG.encode())
    stack.put("models/chatty/1/model.py", CHATTY_CRASH.encode())
    stack.wait_state("chatty", 1, "READY", timeout_s=WAIT_S)
    for _ in range(5):
        answer = stack.inference.post("/v2/models/chatty/infer", json=body(1), timeout=WAIT_S)
        assert answer.status_code == 500, answer.text
        error = answer.json()["error"]
        assert "exited with status 3" in error and "CUDA out of memory in kernels.py" in error
        assert "/srv" not in error and "weights" not in error and "executing" not in error
    reason = stack.wait_state("chatty", 1, "UNAVAILABLE", timeout_s=WAIT_S)
    assert "CUDA out of memory in kernels.py" in reason and "/srv" not in reason
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "loading weights from /srv/secret/weights/big.bin" in logged
    assert "chatty version 1 worker" in logged and "pid" in logged
