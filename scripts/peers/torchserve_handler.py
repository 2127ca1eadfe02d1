"""TorchServe handler for the benchmark's TorchScript MLP: one JSON row in, 10 floats out.

Requests are `{"data": [784 floats]}`; TorchServe batches them (batchSize, maxBatchDelay)
and this handler runs the batch in one call.
"""

from __future__ import annotations

import json

import torch
from ts.torch_handler.base_handler import BaseHandler


class MLPHandler(BaseHandler):
    def preprocess(self, data):
        rows = []
        for request in data:
            body = request.get("body") or request.get("data")
            if isinstance(body, (bytes, bytearray)):
                body = json.loads(body)
            rows.append(body["data"] if isinstance(body, dict) else body)
        return torch.tensor(rows, dtype=torch.float32)

    def inference(self, data, *args, **kwargs):
        with torch.inference_mode():
            return self.model(data)

    def postprocess(self, data):
        return data.tolist()
