"""Implicit state as an output, as Triton's qa/L0_implicit_state checks it (its output tests,
on our own running-sum model, ``tests/sequence_models.py``), against ``lambdaserve serve``
with tritonclient:

- asking for the state output (``ACC_OUT``) where the config does not list it under
  ``output`` gets Triton's "unexpected inference output 'ACC_OUT' for model" (400);
- a copy whose config lists it answers the state beside ``OUTPUT``.

(The rest of Triton's L0_implicit_state drives its C++ ``implicit_state`` test backend.)"""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests import sequence_models
from tests.integration.grpc_support import lambdaserve_serve

MODEL = "running_sum"
LISTED = 'output [ { name: "ACC_OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'


@pytest.fixture
def state_models(stack):
    """The model, and its ``_output`` copy whose config adds the state to its outputs."""
    for name, extra in ((MODEL, ""), (f"{MODEL}_output", LISTED)):
        files = sequence_models.simple_string_dyna_sequence(name)
        files["config.pbtxt"] = files["config.pbtxt"] + extra.encode()
        for path, body in files.items():
            stack.put(f"models/{name}/{path}", body)
    for name in (MODEL, f"{MODEL}_output"):
        stack.wait_state(name, 1, "READY")


def _infer(client, model: str, outputs: list[str], value: int, *, start: bool, end: bool):
    tensor = httpclient.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.full((1, 1), value, np.int32))
    return client.infer(
        model_name=model,
        inputs=[tensor],
        outputs=[httpclient.InferRequestedOutput(name) for name in outputs],
        sequence_id="7",
        sequence_start=start,
        sequence_end=end,
    )


def test_the_state_is_an_output_only_where_the_config_lists_it(state_models):
    # Given serve with the model and its _output copy
    with lambdaserve_serve() as served:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{served.http}")
        # When tritonclient asks the model for its state output, not listed under output
        with pytest.raises(InferenceServerException) as refused:
            _infer(client, MODEL, ["ACC_OUT"], 1, start=True, end=True)
        # and asks the _output copy for it beside OUTPUT, over two steps of one sequence
        first = _infer(client, f"{MODEL}_output", ["ACC_OUT", "OUTPUT"], 5, start=True, end=False)
        second = _infer(client, f"{MODEL}_output", ["ACC_OUT", "OUTPUT"], 3, start=False, end=True)
    # Then the first is refused with Triton's words (400), the copy answers the running sum
    # as its state each step (and OUTPUT adds the id at the end)
    assert refused.value.status() == "400"
    assert f"unexpected inference output 'ACC_OUT' for model '{MODEL}'" in str(refused.value)
    assert (first.as_numpy("ACC_OUT")[0][0], first.as_numpy("OUTPUT")[0][0]) == (5, 5)
    assert (second.as_numpy("ACC_OUT")[0][0], second.as_numpy("OUTPUT")[0][0]) == (8, 15)
