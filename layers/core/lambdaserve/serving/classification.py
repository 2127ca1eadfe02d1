"""Triton's classification extension: an output asked for with ``classification: k``
answers its top k classes as BYTES ``"score:index[:label]"``, per batch row.

Labels come from the file the output's ``label_filename`` names (read into the catalog at
publish), line i labelling class i.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from lambdaserve.errors import InvalidInput
from lambdaserve.protocol.v2 import InferRequest

if TYPE_CHECKING:
    from lambdaserve.serving.version_resolver import ServedVersion


def classify(
    request: InferRequest, served: ServedVersion, outputs: dict[str, np.ndarray[Any, Any]]
) -> dict[str, np.ndarray[Any, Any]]:
    """``outputs`` with every output the request classifies replaced by its top k."""
    wanted = [o for o in request.outputs if o.classification is not None]
    if not wanted:
        return outputs
    classified = dict(outputs)
    for output in wanted:
        array = outputs.get(output.name)
        if array is None:
            continue
        assert output.classification is not None
        spec = next((s for s in served.signature.outputs if s.name == output.name), None)
        batched = served.config.max_batch_size > 0 or (spec is not None and spec.shape[:1] == (-1,))
        classified[output.name] = top_k(
            output.name,
            array,
            output.classification,
            served.class_labels.get(output.name, ()),
            batched=batched and array.ndim >= 1,
        )
    return classified


def top_k(
    name: str, scores: np.ndarray[Any, Any], k: int, labels: Sequence[str], *, batched: bool
) -> np.ndarray[Any, Any]:
    """The top ``k`` of each batch row (of the whole tensor when not batched), highest
    first; ties keep the lower index first, as a stable sort does."""
    if scores.dtype.kind not in "biuf":
        raise InvalidInput(
            f"output {name!r} is {scores.dtype}: classification needs numeric scores"
        )
    rows = scores.reshape(scores.shape[0], -1) if batched else scores.reshape(1, -1)
    k = min(k, rows.shape[1])
    answer = np.empty((rows.shape[0], k), dtype=object)
    for r, row in enumerate(rows):
        order = np.argsort(-row.astype(np.float64), kind="stable")[:k]
        for j, index in enumerate(order):
            text = f"{float(row[index]):f}:{int(index)}"
            if int(index) < len(labels):
                text += f":{labels[int(index)]}"
            answer[r, j] = text.encode()
    return answer if batched else answer.reshape(k)
