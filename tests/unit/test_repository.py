from __future__ import annotations

import pytest

from lambdaserve.catalog.repository import ConfigKey, VersionFileKey, decode_event_key, parse_key
from lambdaserve.errors import InvalidInput
from lambdaserve.protocol.names import check_model_name, parse_version


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("models/resnet/config.pbtxt", ConfigKey("resnet", "config.pbtxt")),
        ("models/resnet/config.json", ConfigKey("resnet", "config.json")),
        # any model-level file may be one the config names (an output's label_filename)
        ("models/resnet/labels.txt", ConfigKey("resnet", "labels.txt")),
        ("models/resnet/1/model.onnx", VersionFileKey("resnet", 1, "model.onnx")),
        ("models/r.e-s_1/12/model.pt", VersionFileKey("r.e-s_1", 12, "model.pt")),
        ("models/bert/3/weights/part.bin", VersionFileKey("bert", 3, "weights/part.bin")),
    ],
)
def test_keys_inside_the_layout_map_to_model_version_and_file(key, expected):
    # Given a key of the Triton layout / When it is parsed / Then its parts come back
    assert parse_key(key) == expected


@pytest.mark.parametrize(
    "key",
    [
        "other/resnet/1/model.onnx",  # outside the prefix
        "models/resnet",  # no file
        "models/resnet/0/model.onnx",  # versions are positive
        "models/resnet/01/model.onnx",  # no leading zeros: one spelling per version
        "models/resnet/v1/model.onnx",
        "models/-bad/1/model.onnx",  # names start with a letter or digit
        "models/a b/1/model.onnx",
        "models/" + "x" * 129 + "/1/model.onnx",
        "models/resnet/1/../../evil/1/model.onnx",  # traversal
        "models/resnet/1/./model.onnx",
        "models/resnet/1/dir//model.onnx",
        "models/resnet/1/",  # a folder marker
    ],
)
def test_keys_outside_the_layout_are_ignored_not_crashed_on(key):
    assert parse_key(key) is None


def test_event_keys_are_url_decoded():
    # Given S3's encoding in event notifications (slashes, '+' for spaces)
    assert decode_event_key("models%2Fresnet%2F1%2Fmodel.onnx") == "models/resnet/1/model.onnx"
    assert decode_event_key("models/a+b/1/x") == "models/a b/1/x"


def test_name_and_version_checks_say_what_is_allowed():
    assert check_model_name("resnet50") == "resnet50"
    with pytest.raises(InvalidInput, match=r"A-Za-z0-9_\.-"):
        check_model_name("../etc")
    assert parse_version("7") == 7
    with pytest.raises(InvalidInput, match="positive integers"):
        parse_version("latest")
