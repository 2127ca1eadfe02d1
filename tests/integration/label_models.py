"""The Python model the rollout and shadow tests publish under several versions: one FP32
input and output of four columns, its code given per version."""

from __future__ import annotations

CONFIG = b"""
backend: "python"
max_batch_size: 0
version_policy: { all { } }
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]
"""
BODY = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}
