"""BLS requests as python_backend shapes them: a timeout (microseconds) that answers with
Triton's error instead of waiting, and a preferred memory that CPU tensors satisfy."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np

from lambdaserve.runtimes import model_calls
from lambdaserve.runtimes.triton_python import pb_utils


def test_a_bls_call_past_its_timeout_answers_with_tritons_error(monkeypatch):
    # Given a model that answers only when released (a slow step behind a BLS call)
    released = threading.Event()

    def slow(model, version, inputs, outputs, timeout_us=0, **given):
        released.wait(10)
        return {"y": np.ones(1, np.float32)}

    monkeypatch.setattr(model_calls, "current", lambda: SimpleNamespace(infer=slow))
    request = pb_utils.InferenceRequest(
        model_name="slow",
        inputs=[pb_utils.Tensor("x", np.ones(1, np.float32))],
        requested_output_names=["y"],
        timeout=50_000,  # 50 ms, in microseconds as Triton counts
        preferred_memory=pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU, 0),
    )
    # When it runs past its timeout
    try:
        response = request.exec()
    finally:
        released.set()
    # Then it answers with the error Triton gives, without the model's answer
    assert response.has_error()
    assert response.error().message() == "Request timeout expired"
    # and without a timeout the same call waits for the answer
    untimed = pb_utils.InferenceRequest(
        model_name="slow", inputs=[], requested_output_names=["y"]
    ).exec()
    assert not untimed.has_error()
    assert pb_utils.get_output_tensor_by_name(untimed, "y").as_numpy().tolist() == [1.0]
