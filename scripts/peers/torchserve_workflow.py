"""TorchServe workflow functions for scripts/bench_pipelines.py: pre -> mlp -> post.

The workflow's first node gets the request (`{"data": [784 floats]}`); nodes pass raw FP32
bytes to each other (TorchServe hands every node its input as bytes). The step bodies are
those of scripts/peers/pipeline_repo/{pre,post}/1/model.py.
"""

from __future__ import annotations

import json

import numpy as np


def _payload(request):
    body = request.get("data")
    return request.get("body") if body is None else body


def pre_processing(data, context):
    if not data:
        return None
    out = []
    for request in data:
        body = _payload(request)
        if isinstance(body, (bytes, bytearray)):
            body = json.loads(body)
        x = np.asarray(body["data"] if isinstance(body, dict) else body, np.float32)
        out.append(((x - 0.5) / 0.25).astype(np.float32).tobytes())
    return out


def post_processing(data, context):
    if not data:
        return None
    out = []
    for request in data:
        x = np.frombuffer(_payload(request), np.float32).reshape(1, -1)
        e = np.exp(x - x.max(axis=1, keepdims=True))
        out.append(json.dumps((e / e.sum(axis=1, keepdims=True)).ravel().tolist()))
    return out
