"""Every field of Triton's ModelConfig message (tritonclient's descriptor, walked nested and
whole, so a field added to the proto cannot be forgotten) is applied, refused at publish
with the reason, or named in the catalog's warnings."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from google.protobuf import json_format

from lambdaserve.config.support import check_supported, warnings_for
from lambdaserve.config.triton_proto import pb
from lambdaserve.config.unapplied_fields import APPLIED
from lambdaserve.errors import InvalidInput

_MAX_DEPTH = 4  # ModelConfig's messages nest no deeper than this where fields differ


def field_paths(descriptor: Any, prefix: str = "", depth: int = 0) -> Iterator[str]:
    for field in descriptor.fields:
        path = f"{prefix}{field.name}"
        nested = field.message_type
        if nested is None or nested.GetOptions().map_entry or depth >= _MAX_DEPTH:
            yield path
        else:
            yield from field_paths(nested, path + ".", depth + 1) or [path]


def document_setting(path: str) -> dict[str, Any]:
    """A config (Triton JSON) that sets the field at ``path`` to a non-default value."""
    message = pb.ModelConfig(name="m")
    _set(message, path.split("."))
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def _set(message: Any, names: list[str]) -> None:
    field = message.DESCRIPTOR.fields_by_name[names[0]]
    value = getattr(message, names[0])
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key = _scalar(field.message_type.fields_by_name["key"])
        if field.message_type.fields_by_name["value"].message_type is None:
            value[key] = _scalar(field.message_type.fields_by_name["value"])
        else:
            value[key].SetInParent()
        return
    if field.message_type is not None:
        target = value.add() if field.is_repeated else value
        if len(names) == 1:
            target.SetInParent()
        else:
            _set(target, names[1:])
        return
    if field.is_repeated:
        value.append(_scalar(field))
    else:
        setattr(message, names[0], _scalar(field))


def _scalar(field: Any) -> Any:
    if field.enum_type is not None:
        return field.enum_type.values[-1].number
    kind = field.cpp_type
    if kind == field.CPPTYPE_STRING:
        return "x"
    if kind == field.CPPTYPE_BOOL:
        return True
    if kind in (field.CPPTYPE_FLOAT, field.CPPTYPE_DOUBLE):
        return 1.5
    return 2  # not 1: a count of one instance is what is applied


def _applied(path: str) -> bool:
    return any(path == p or path.startswith(p + ".") for p in APPLIED)


PATHS = sorted(set(field_paths(pb.ModelConfig.DESCRIPTOR)))


def test_the_walk_reaches_nested_fields():
    assert "instance_group.rate_limiter.resources.name" in PATHS
    assert "dynamic_batching.preserve_ordering" in PATHS
    assert len(PATHS) > 100


@pytest.mark.parametrize("path", PATHS)
def test_every_field_is_applied_refused_or_named(path):
    document = document_setting(path)
    try:
        check_supported(document)
    except InvalidInput as refused:
        assert refused.message  # refused at publish, saying why
        return
    if _applied(path):
        return
    top = path.split(".")[0]
    warnings = " ".join(warnings_for(document))
    assert top in warnings or path in warnings, f"{path} vanishes without a word: {warnings!r}"


def test_parameters_reach_python_models_and_are_named_for_other_runtimes():
    onnx = {"parameters": {"intra_op_thread_count": {"string_value": "4"}}}
    assert any("parameters is not applied" in w for w in warnings_for(onnx))
    assert not any("parameters" in w for w in warnings_for({**onnx, "backend": "python"}))
