"""The models the feature-by-door matrix sends its asks to, as files to upload under
``models/<name>/``: a Python model taking its time (for the scheduler's rows), and the BLS
caller (the matrix's BLS door: its code asks the model the client names in its ``target``
parameter, passing the client's request id and timeout on, as a Triton BLS model does)."""

from __future__ import annotations

from tests.integration.matrix_doors import BLS, INPUT, OUTPUT

SLOW_CODE = f'''
import json
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {{}})
        self.delay_s = int(parameters["execute_delay_ms"]["string_value"]) / 1000

    def execute(self, requests):
        time.sleep(self.delay_s)
        taken = [pb_utils.get_input_tensor_by_name(r, "{INPUT}").as_numpy() for r in requests]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("{OUTPUT}", x)]) for x in taken]
'''

BLS_CODE = f'''
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            asked = pb_utils.InferenceRequest(
                model_name=json.loads(request.parameters() or "{{}}")["target"],
                requested_output_names=["{OUTPUT}"],
                inputs=[pb_utils.get_input_tensor_by_name(request, "{INPUT}")],
                request_id=request.request_id(),
                timeout=request.timeout(),
            )
            answer = asked.exec()
            if answer.has_error():
                error = pb_utils.TritonError(answer.error().message())
                responses.append(pb_utils.InferenceResponse(error=error))
            else:
                output = pb_utils.get_output_tensor_by_name(answer, "{OUTPUT}")
                responses.append(pb_utils.InferenceResponse([output]))
        return responses
'''

BLS_CONFIG = f"""
backend: "python"
max_batch_size: 0
input [ {{ name: "{INPUT}" data_type: TYPE_FP32 dims: [ -1, 4 ] }} ]
output [ {{ name: "{OUTPUT}" data_type: TYPE_FP32 dims: [ -1, -1 ] }} ]
instance_group [ {{ count: 4 kind: KIND_CPU }} ]
"""


def bls_caller() -> dict[str, bytes]:
    """The BLS caller's files (a batch dimension of its own: nine rows reach the callee)."""
    return {"config.pbtxt": BLS_CONFIG.encode(), "1/model.py": BLS_CODE.encode()}


def slow(delay_ms: int, scheduling: str, instances: str = "count: 1") -> dict[str, bytes]:
    """A Python identity taking ``delay_ms`` per execution, scheduled as ``scheduling`` says."""
    config = f"""
backend: "python"
max_batch_size: 8
input [ {{ name: "{INPUT}" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "{OUTPUT}" data_type: TYPE_FP32 dims: [ 4 ] }} ]
instance_group [ {{ {instances} kind: KIND_CPU }} ]
parameters [ {{ key: "execute_delay_ms" value: {{ string_value: "{delay_ms}" }} }} ]
{scheduling}
"""
    return {"config.pbtxt": config.encode(), "1/model.py": SLOW_CODE.encode()}


__all__ = ["BLS", "bls_caller", "slow"]
