"""A decoupled model's stream ends at its final flag, not when execute returns: responses
sent from the model's own thread after execute returned (python_backend's repeat example)
reach the caller, and a sender dropped without the flag fails the stream at once."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

from lambdaserve.errors import InferenceError
from lambdaserve.runtimes.triton_python import pb_utils
from lambdaserve.runtimes.triton_python.decoupled import stream_responses


def _answer(response: Any, outputs: Any) -> dict[str, np.ndarray]:
    return {t.name(): t.as_numpy() for t in response.output_tensors()}


class SendsFromAThread:
    def execute(self, requests):
        sender = requests[0].get_response_sender()

        def respond() -> None:
            for index in range(3):
                time.sleep(0.02)
                out = pb_utils.Tensor("OUT", np.array([index], np.int32))
                sender.send(pb_utils.InferenceResponse([out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

        threading.Thread(target=respond, daemon=True).start()  # execute returns at once


class DropsTheSender:
    def execute(self, requests):
        sender = requests[0].get_response_sender()
        sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([7]))]))
        # returns holding the sender nowhere: the final flag can never come


def test_responses_sent_after_execute_returned_reach_the_caller() -> None:
    """Given a decoupled model whose execute returns before its thread sends anything,
    When its responses are streamed,
    Then every one comes, in order, and the stream ends at the final flag."""
    streamed = stream_responses(SendsFromAThread(), "/m", {}, ["OUT"], _answer)
    assert [a["OUT"].tolist() for a in streamed] == [[0], [1], [2]]


def test_a_sender_dropped_without_the_final_flag_fails_the_stream_at_once() -> None:
    """Given a decoupled model that sends one response and returns, keeping no sender,
    When its responses are streamed,
    Then its response comes, then (not after RESPONSE_GAP_S) an error naming the flag."""
    streamed = stream_responses(DropsTheSender(), "/m", {}, ["OUT"], _answer)
    assert next(streamed)["OUT"].tolist() == [7]
    started = time.monotonic()
    with pytest.raises(InferenceError, match="TRITONSERVER_RESPONSE_COMPLETE_FINAL"):
        next(streamed)
    assert time.monotonic() - started < 5
