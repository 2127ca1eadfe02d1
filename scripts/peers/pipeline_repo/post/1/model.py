# The pipeline benchmark's postprocessing step: softmax of the logits over each row.
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            e = np.exp(x - x.max(axis=1, keepdims=True))
            y = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", y)]))
        return responses
