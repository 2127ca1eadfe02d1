"""An ensemble's graph is checked at publish as Triton checks it: every step can run, every
output is produced, every input consumed, tensors agree between steps."""

from __future__ import annotations

import pytest

from lambdaserve.config.model_config import build, parse_document
from lambdaserve.errors import InvalidInput, ModelRejected
from lambdaserve.runtimes.ensemble import check_steps, plan
from lambdaserve.tensors.signature import Signature

HEAD = b"""platform: "ensemble"
input [{ name: "IN" data_type: TYPE_FP32 dims: [ -1, 4 ] }]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [ -1, 4 ] }]
"""


def config(steps: str, head: bytes = HEAD):
    text = head + b"ensemble_scheduling { step [ " + steps.encode() + b" ] }"
    return build(parse_document("config.pbtxt", text), "ens")


def step(model: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    maps = "".join(f'input_map {{ key: "{k}" value: "{v}" }} ' for k, v in inputs.items())
    maps += "".join(f'output_map {{ key: "{k}" value: "{v}" }} ' for k, v in outputs.items())
    return f'{{ model_name: "{model}" model_version: -1 {maps}}}'


def signature(inputs: dict[str, str], outputs: dict[str, str], shape=(-1, 4)) -> Signature:
    return Signature.from_json(
        {
            "inputs": [{"name": n, "datatype": d, "shape": list(shape)} for n, d in inputs.items()],
            "outputs": [
                {"name": n, "datatype": d, "shape": list(shape)} for n, d in outputs.items()
            ],
        }
    )


def test_independent_steps_run_in_the_same_wave():
    graph = config(
        ", ".join(
            [
                step("a", {"x": "IN"}, {"y": "A"}),
                step("b", {"x": "IN"}, {"y": "B"}),
                step("c", {"x": "A", "z": "B"}, {"y": "OUT"}),
            ]
        )
    )
    assert [wave.steps for wave in plan(graph)] == [(0, 1), (2,)]


@pytest.mark.parametrize(
    ("steps", "why"),
    [
        (
            [step("a", {"x": "B"}, {"y": "A"}), step("b", {"x": "A"}, {"y": "B"})],
            "can never run: a cycle",
        ),
        ([step("a", {"x": "NOPE"}, {"y": "OUT"})], "tensors nothing produces: ['NOPE']"),
        ([step("a", {"x": "IN"}, {"y": "MID"})], "output 'OUT' is produced by no step"),
        (
            [step("a", {"x": "IN"}, {"y": "OUT"}), step("b", {"x": "IN"}, {"y": "OUT"})],
            "'OUT' is produced twice",
        ),
    ],
)
def test_broken_graphs_are_rejected_naming_the_problem(steps, why):
    with pytest.raises(ModelRejected, match=why.replace("[", r"\[").replace("]", r"\]")):
        plan(config(", ".join(steps)))


def test_an_unconsumed_input_is_rejected():
    head = HEAD.replace(b"input [", b'input [{ name: "EXTRA" data_type: TYPE_FP32 dims: [1] },')
    with pytest.raises(ModelRejected, match="input 'EXTRA' is consumed by no step"):
        plan(config(step("a", {"x": "IN"}, {"y": "OUT"}), head))


def test_tensors_must_agree_between_steps():
    graph = config(
        ", ".join([step("a", {"x": "IN"}, {"y": "MID"}), step("b", {"x": "MID"}, {"y": "OUT"})])
    )
    good = [signature({"x": "FP32"}, {"y": "FP32"}), signature({"x": "FP32"}, {"y": "FP32"})]
    check_steps(graph, good)
    wrong_type = [signature({"x": "FP32"}, {"y": "INT64"}), signature({"x": "FP32"}, {"y": "FP32"})]
    with pytest.raises(ModelRejected, match="step 1 \\('b'\\): tensor 'MID' is INT64"):
        check_steps(graph, wrong_type)
    with pytest.raises(ModelRejected, match="step 0 \\('a'\\): the model has no input 'x'"):
        check_steps(graph, [signature({"q": "FP32"}, {"y": "FP32"}), good[1]])


def test_ensemble_configs_need_their_steps():
    with pytest.raises(InvalidInput, match="needs ensemble_scheduling"):
        build(parse_document("config.pbtxt", HEAD), "ens")
