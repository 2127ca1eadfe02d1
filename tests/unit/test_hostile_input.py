"""Hostile values in requests are 400s that say what is wrong, never 500s (issue: eight 500s,
null as NaN). Each case was a 500 or a silently wrong 200 before."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lambdaserve.errors import InvalidInput
from lambdaserve.protocol.limits import MAX_JSON_DEPTH, check_depth, header_int, json_document
from lambdaserve.protocol.v2 import parse_infer_request


def nested(depth: int, leaf: object = "x") -> object:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def request(inputs: list[dict]) -> bytes:
    return json.dumps({"inputs": inputs}).encode()


@pytest.mark.parametrize("raw", ["²", "1²", "٣", "9" * 5000, "-1", "1e3", " ", "0x10"])
def test_header_numbers_are_ascii_digits_only(raw):
    # Given a header value that int() or str.isdigit() would take, or choke on
    # When it is parsed Then it is a 400 naming the header
    with pytest.raises(InvalidInput, match="Inference-Header-Content-Length must be"):
        header_int("Inference-Header-Content-Length", raw)


def test_header_numbers_parse_when_they_are_numbers():
    assert header_int("Content-Length", "123") == 123
    assert header_int("Content-Length", None) is None


def test_a_bytes_input_nested_990_deep_is_a_400_not_a_recursion_error():
    data = b"[" * 990 + b'"x"' + b"]" * 990
    body = b'{"inputs":[{"name":"t","datatype":"BYTES","shape":[1],"data":' + data + b"}]}"
    with pytest.raises(InvalidInput, match=r"nesting depth exceeds maximum allowed limit \(100\)"):
        parse_infer_request(body)


def test_a_shape_with_70_dimensions_is_a_400():
    body = request([{"name": "t", "datatype": "FP32", "shape": [1] * 70, "data": [1.0]}])
    with pytest.raises(InvalidInput, match="shape has 70 dimensions; at most 64"):
        parse_infer_request(body)


def test_a_body_nested_past_orjsons_limit_is_a_400():
    body = b'{"inputs": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    with pytest.raises(InvalidInput, match="nests deeper than"):
        parse_infer_request(body)


def test_deep_request_parameters_are_a_400():
    deep: object = {}
    for _ in range(300):
        deep = {"a": deep}
    body = json.dumps(
        {
            "inputs": [{"name": "t", "datatype": "FP32", "shape": [1], "data": [1.0]}],
            "parameters": {"x": deep},
        }
    ).encode()
    with pytest.raises(InvalidInput, match="parameters.*nests deeper"):
        parse_infer_request(body)


@pytest.mark.parametrize(
    ("datatype", "data", "element"),
    [
        ("FP32", [1.0, None, 3.0], "element 1 is null"),
        ("FP16", [[1.0], [None]], "element 1 is null"),
        ("FP64", [None], "element 0 is null"),
        ("FP32", [1.0, "nan"], 'element 1 is "nan"'),
        ("BOOL", [True, None], "element 1 is null"),
        ("BOOL", [True, 0], "element 1 is 0"),
    ],
)
def test_null_is_not_a_number(datatype, data, element):
    # Given JSON data with a null where a number (or boolean) belongs
    shape = [len(data)] if not isinstance(data[0], list) else [len(data), 1]
    body = request([{"name": "t", "datatype": datatype, "shape": shape, "data": data}])
    # Then it is refused naming the element, not run as NaN (or False)
    with pytest.raises(InvalidInput, match=element):
        parse_infer_request(body)


def test_null_in_integer_data_stays_a_400():
    body = request([{"name": "t", "datatype": "INT64", "shape": [2], "data": [1, None]}])
    with pytest.raises(InvalidInput, match="data is not INT64"):
        parse_infer_request(body)


def test_real_numbers_and_booleans_still_parse():
    body = request(
        [
            {"name": "f", "datatype": "FP32", "shape": [2, 2], "data": [[1, 2.5], [3, -4]]},
            {"name": "b", "datatype": "BOOL", "shape": [2], "data": [True, False]},
            {"name": "s", "datatype": "BYTES", "shape": [1, 2], "data": [["a", "b"]]},
        ]
    )
    parsed = {t.name: t.data for t in parse_infer_request(body).inputs}
    assert parsed["f"].tolist() == [[1.0, 2.5], [3.0, -4.0]]
    assert parsed["b"].dtype == np.bool_ and parsed["b"].tolist() == [True, False]
    assert parsed["s"].tolist() == [[b"a", b"b"]]


def test_json_documents_have_a_nesting_limit():
    deep = json.dumps(nested(MAX_JSON_DEPTH + 1)).encode()
    with pytest.raises(InvalidInput, match=f"deeper than {MAX_JSON_DEPTH} levels"):
        json_document(deep)
    with pytest.raises(InvalidInput, match="deeper than"):
        json_document(b"[" * 5000 + b"]" * 5000)
    assert json_document(json.dumps(nested(MAX_JSON_DEPTH - 1)).encode())


def test_check_depth_walks_without_recursion():
    value: object = 1
    for _ in range(50_000):
        value = {"k": value}
    with pytest.raises(InvalidInput):
        check_depth(value, "it")
