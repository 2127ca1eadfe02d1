"""Triton's classification extension and the label files it reads."""

from __future__ import annotations

import numpy as np
import pytest

from lambdaserve.config.model_config import build
from lambdaserve.errors import InvalidInput
from lambdaserve.protocol.v2 import parse_infer_request
from lambdaserve.serving.classification import top_k


def test_top_k_per_batch_row_highest_first_with_labels():
    scores = np.array([[0.1, 0.7, 0.2], [0.5, 0.1, 0.4]], np.float32)
    answer = top_k("P", scores, 2, ["cat", "dog"], batched=True)
    assert answer.shape == (2, 2)
    assert answer.tolist() == [
        [b"0.700000:1:dog", b"0.200000:2"],  # index 2 has no label line: score:index
        [b"0.500000:0:cat", b"0.400000:2"],
    ]


def test_an_unbatched_output_is_ranked_whole_and_k_is_capped():
    answer = top_k("P", np.array([3, 1, 2], np.int32), 10, [], batched=False)
    assert answer.tolist() == [b"3.000000:0", b"2.000000:2", b"1.000000:1"]


def test_bytes_outputs_cannot_be_classified():
    with pytest.raises(InvalidInput, match="classification needs numeric scores"):
        top_k("S", np.array([b"a"], dtype=object), 1, [], batched=False)


@pytest.mark.parametrize("value", [0, -1, "3", True, 1.5])
def test_classification_must_be_a_positive_integer(value):
    body = (
        b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}],'
        b' "outputs": [{"name": "y", "parameters": {"classification": '
        + (f'"{value}"' if isinstance(value, str) else str(value).lower()).encode()
        + b"}}]}"
    )
    with pytest.raises(InvalidInput, match="positive integer"):
        parse_infer_request(body, None)


@pytest.mark.parametrize("name", ["../labels.txt", "sub/labels.txt", "config.pbtxt", ".."])
def test_label_files_sit_beside_the_config(name):
    document = {"output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [3]}]}
    document["output"][0]["label_filename"] = name
    with pytest.raises(InvalidInput, match="must name a file beside config.pbtxt"):
        build(document, "m")


def test_label_files_show_in_the_config_as_triton_shows_them():
    document = {
        "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [3], "label_filename": "l.txt"}]
    }
    config = build(document, "m")
    assert config.label_files == (("y", "l.txt"),)
    assert config.to_triton_json()["output"][0]["label_filename"] == "l.txt"


def test_free_form_parameters_reach_the_config_as_triton_gives_them():
    # Python models read them from args["model_config"] (e.g. EXECUTION_ENV_PATH, thresholds)
    document = {"parameters": {"threshold": {"string_value": "0.5"}}}
    assert build(document, "m").to_triton_json()["parameters"] == {
        "threshold": {"string_value": "0.5"}
    }
