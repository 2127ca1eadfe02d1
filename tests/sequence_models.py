"""Triton's sequence example models, built as ONNX graphs with onnx.helper: the models
tritonclient's sequence examples talk to (``simple_sequence``, ``simple_dyna_sequence``,
``simple_string_dyna_sequence``), each as ``{path: bytes}`` under ``models/<name>/``.

- simple_sequence: OUTPUT = (INPUT + START) * READY (controls START and READY; any id).
- simple_dyna_sequence: OUTPUT = (INPUT + START + END * CORRID) * READY (a UINT64 CORRID),
  as Triton's dyna_sequence backend adds the correlation ID to the last request.
- simple_string_dyna_sequence: a running sum kept in implicit state (ACC_IN -> ACC_OUT),
  OUTPUT = sum + END * int(CORRID) with a STRING CORRID, so a sequence moved between
  instances gives the right answers only if its state travels with it.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

INT = TensorProto.INT32


def _tensor(name: str, kind: int = INT) -> object:
    return helper.make_tensor_value_info(name, kind, ["batch", 1])


def _onnx(name: str, nodes: list, inputs: list, outputs: list) -> bytes:
    graph = helper.make_graph(nodes, name, inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def _control(name: str, kind: str) -> str:
    control = f"kind: CONTROL_SEQUENCE_{kind} int32_false_true: [ 0, 1 ]"
    return f'{{ name: "{name}" control [ {{ {control} }} ] }}'


def _config(
    name: str,
    controls: list[str],
    extra: str = "",
    strategy: str = "direct { }",
    idle_us: int = 5_000_000,
) -> bytes:
    return (
        f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        f"sequence_batching {{\n  max_sequence_idle_microseconds: {idle_us}\n  {strategy}\n"
        f"  control_input [ {', '.join(controls)} ]\n{extra}}}\n"
        'input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
    ).encode()


def simple_sequence(strategy: str = "direct { }", idle_us: int = 5_000_000) -> dict[str, bytes]:
    model = _onnx(
        "simple_sequence",
        [
            helper.make_node("Add", ["INPUT", "START"], ["sum"]),
            helper.make_node("Mul", ["sum", "READY"], ["OUTPUT"]),
        ],
        [_tensor("INPUT"), _tensor("START"), _tensor("READY")],
        [_tensor("OUTPUT")],
    )
    controls = [_control("START", "START"), _control("READY", "READY")]
    return {
        "config.pbtxt": _config("simple_sequence", controls, strategy=strategy, idle_us=idle_us),
        "1/model.onnx": model,
    }


def simple_dyna_sequence(idle_us: int = 5_000_000) -> dict[str, bytes]:
    model = _onnx(
        "simple_dyna_sequence",
        [
            helper.make_node("Cast", ["CORRID"], ["id"], to=INT),
            helper.make_node("Mul", ["END", "id"], ["tail"]),
            helper.make_node("Add", ["INPUT", "START"], ["head"]),
            helper.make_node("Add", ["head", "tail"], ["sum"]),
            helper.make_node("Mul", ["sum", "READY"], ["OUTPUT"]),
        ],
        [
            _tensor("INPUT"),
            _tensor("START"),
            _tensor("END"),
            _tensor("READY"),
            _tensor("CORRID", TensorProto.UINT64),
        ],
        [_tensor("OUTPUT")],
    )
    controls = [
        _control("START", "START"),
        _control("END", "END"),
        _control("READY", "READY"),
        '{ name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }',
    ]
    return {
        "config.pbtxt": _config("simple_dyna_sequence", controls, idle_us=idle_us),
        "1/model.onnx": model,
    }


def simple_string_dyna_sequence(
    name: str = "simple_string_dyna_sequence",
    strategy: str = "direct { }",
    start_at: int | None = None,
    idle_us: int = 5_000_000,
) -> dict[str, bytes]:
    """``start_at``: the running sum's initial value from an initial_state data_file
    (``initial_state/acc_start``, four bytes), instead of zero_data. ``idle_us``: how long
    the sequence may wait between steps (a step through a cold function may take seconds)."""
    model = _onnx(
        name,
        [
            helper.make_node("Add", ["ACC_IN", "INPUT"], ["ACC_OUT"]),
            helper.make_node("Cast", ["CORRID"], ["id"], to=INT),
            helper.make_node("Mul", ["END", "id"], ["tail"]),
            helper.make_node("Add", ["ACC_OUT", "tail"], ["OUTPUT"]),
        ],
        [
            _tensor("INPUT"),
            _tensor("START"),
            _tensor("END"),
            _tensor("CORRID", TensorProto.STRING),
            _tensor("ACC_IN"),
        ],
        [_tensor("OUTPUT"), _tensor("ACC_OUT")],
    )
    controls = [
        _control("START", "START"),
        _control("END", "END"),
        '{ name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } ] }',
    ]
    initial = "zero_data: true" if start_at is None else 'data_file: "acc_start"'
    state = (
        '  state [ { input_name: "ACC_IN" output_name: "ACC_OUT" data_type: TYPE_INT32 '
        f"dims: [ 1 ] initial_state {{ data_type: TYPE_INT32 dims: [ 1 ] {initial} "
        'name: "start" } } ]\n'
    )
    config = _config(name, controls, state, strategy, idle_us)
    files = {"config.pbtxt": config, "1/model.onnx": model}
    if start_at is not None:
        files["initial_state/acc_start"] = np.array([start_at], np.int32).tobytes()
    return files


def wide_accumulator(name: str = "wide_accumulator", width: int = 120_000) -> dict[str, bytes]:
    """A running sum held ``width`` times over in its implicit state (ACC_IN -> ACC_OUT,
    int32 [width]: 480 KB at the default, over a DynamoDB item's 400 KB), OUTPUT its
    largest element: a state that must live outside the item to carry the sum."""
    wide = helper.make_tensor_value_info
    model = _onnx(
        name,
        [
            helper.make_node("Add", ["ACC_IN", "INPUT"], ["ACC_OUT"]),
            helper.make_node("ReduceMax", ["ACC_OUT"], ["OUTPUT"], axes=[1], keepdims=1),
        ],
        [_tensor("INPUT"), _tensor("START"), wide("ACC_IN", INT, ["batch", width])],
        [_tensor("OUTPUT"), wide("ACC_OUT", INT, ["batch", width])],
    )
    state = (
        '  state [ { input_name: "ACC_IN" output_name: "ACC_OUT" data_type: TYPE_INT32 '
        f"dims: [ {width} ] initial_state {{ data_type: TYPE_INT32 dims: [ {width} ] "
        'zero_data: true name: "zero" } } ]\n'
    )
    config = _config(name, [_control("START", "START")], state)
    return {"config.pbtxt": config, "1/model.onnx": model}


def every_model(idle_us: int = 5_000_000) -> dict[str, dict[str, bytes]]:
    """The three examples; ``idle_us``: their idle limit (Triton's examples say 5 s; a test
    whose steps cross processes on a loaded machine gives them longer)."""
    return {
        "simple_sequence": simple_sequence(idle_us=idle_us),
        "simple_dyna_sequence": simple_dyna_sequence(idle_us=idle_us),
        "simple_string_dyna_sequence": simple_string_dyna_sequence(idle_us=idle_us),
    }


PYTHON_ACCUMULATOR = b'''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """A running sum whose state Triton passes in (ACC_IN) and takes back (ACC_OUT); the
    START control counts only where the request's flags say START too, and the END step
    adds the correlation ID (as Triton's dyna_sequence does)."""

    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            start = pb_utils.get_input_tensor_by_name(request, "START").as_numpy()
            total = pb_utils.get_input_tensor_by_name(request, "ACC_IN").as_numpy() + value
            flags = request.flags()
            shown = total + start * (flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START)
            if flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END:
                shown = shown + int(request.correlation_id())
            outputs = [pb_utils.Tensor("OUTPUT", shown), pb_utils.Tensor("ACC_OUT", total)]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
'''


def python_accumulator(name: str = "python_accumulator") -> dict[str, bytes]:
    """A Python model with implicit state: OUTPUT = running sum + START (+ the id at END)."""
    state = (
        '  state [ { input_name: "ACC_IN" output_name: "ACC_OUT" data_type: TYPE_INT32 '
        "dims: [ 1 ] initial_state { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true "
        'name: "z" } } ]\n'
    )
    config = _config(name, [_control("START", "START")], state).replace(
        b'platform: "onnxruntime_onnx"', b'backend: "python"'
    )
    return {"config.pbtxt": config, "1/model.py": PYTHON_ACCUMULATOR}


PYTHON_SUM_IN_SELF = b'''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """A running sum per sequence kept in the instance (Triton's direct strategy keeps a
    sequence on one instance for its whole life, so the model's own memory is its state)."""

    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            value = int(pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy().sum())
            flags = request.flags()
            key = request.correlation_id()
            if flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START:
                self.sums[key] = 0
            self.sums[key] = self.sums.get(key, 0) + value
            total = self.sums[key]
            if flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END:
                del self.sums[key]
            out = np.array([[total]], dtype=np.int32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", out)]))
        return responses
'''


def python_sum_in_self(name: str = "python_sum_in_self", count: int = 2) -> dict[str, bytes]:
    """A Python model keeping each sequence's running sum in ``self``, ``count`` instances."""
    instances = f"instance_group [ {{ count: {count} kind: KIND_CPU }} ]\n".encode()
    config = _config(name, [_control("START", "START")]).replace(
        b'platform: "onnxruntime_onnx"', b'backend: "python"'
    )
    return {"config.pbtxt": config + instances, "1/model.py": PYTHON_SUM_IN_SELF}
