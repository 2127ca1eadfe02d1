"""The trace settings API's values, as Triton's HTTP and gRPC doors read and answer them:
every value a string (``trace_level`` a list of them); a ``null`` (HTTP) or an empty value
list (gRPC) clears a field; ``trace_file`` is refused, as only the command line sets it.
The errors are Triton's words."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from lambdaserve.errors import InvalidInput, SettingFixed
from lambdaserve.tracing.config import TRITON
from lambdaserve.tracing.live_setting import LiveSetting
from lambdaserve.tracing.scopes import SettingUpdate

_NAMES = {"trace_rate": "rate", "trace_count": "count", "log_frequency": "log_frequency"}
_LOW = {"trace_count": -1}
_INT32_MAX, _UINT32_MAX = 2**31 - 1, 2**32 - 1
_LEADING_NUMBER = re.compile(r"\s*[+-]?\d+")  # what C++'s std::stoi reads


def setting_update(body: Mapping[str, Any], grpc: bool = False) -> SettingUpdate:
    """A POST body (HTTP) or a TraceSettingRequest's settings (gRPC: lists of strings) as
    the update it asks for."""
    if "trace_file" in body:
        raise SettingFixed("trace file location can not be updated through network protocol")
    values: dict[str, object] = {}
    cleared: set[str] = set()
    if "trace_level" in body:
        levels = body["trace_level"]
        if levels is None or (grpc and not levels):
            cleared.add("level")
        else:
            level = _levels(levels)
            if level is not None:
                values["level"] = level
    for key, name in _NAMES.items():
        if key not in body:
            continue
        value = body[key]
        if value is None or (grpc and not value):
            cleared.add(name)
            continue
        if grpc:
            if len(value) != 1:
                raise InvalidInput(f"expect only 1 value for '{key}'")
            value = value[0]
        if not isinstance(value, str):
            raise InvalidInput(f'{key} is a string in Triton\'s trace API, e.g. "{key}": "1"')
        values[name] = _number(key, value, grpc)
    return SettingUpdate(values, frozenset(cleared))


def rendered(live: LiveSetting) -> dict[str, str | list[str]]:
    """A setting as Triton answers it: values as strings, ``trace_level`` a list."""
    values = live.values
    answer: dict[str, str | list[str]] = {
        "trace_level": list(values.levels) or ["OFF"],
        "trace_rate": str(values.rate),
        "trace_count": str(live.count),
    }
    if values.mode == TRITON:
        answer["log_frequency"] = str(values.log_frequency)
        answer["trace_file"] = values.file
    answer["trace_mode"] = values.mode
    return answer


def _levels(levels: Any) -> tuple[str, ...] | None:
    """Triton's reading: OFF alone, or TIMESTAMPS and/or TENSORS (other words are
    skipped); None when the list names no level at all."""
    if not isinstance(levels, list) or not all(isinstance(level, str) for level in levels):
        raise InvalidInput('trace_level is a list of strings, e.g. "trace_level": ["TIMESTAMPS"]')
    if "OFF" in levels:
        if len(levels) != 1:
            raise InvalidInput("Expect only one trace level 'OFF' is specified")
        return ()
    chosen = tuple(level for level in ("TIMESTAMPS", "TENSORS") if level in levels)
    return chosen or None


def _number(key: str, text: str, grpc: bool) -> int:
    match = _LEADING_NUMBER.match(text)
    if match is None:
        raise InvalidInput(f"Unable to parse '{key}', got: {text}")
    value = int(match.group())
    low = _LOW.get(key, 0)
    high = _INT32_MAX if key == "trace_count" else _UINT32_MAX
    out_of_range = f"Unable to parse '{key}', value is out of range [ {low}, {high} ], got: {text}"
    if not -(2**31) <= value <= _INT32_MAX:
        raise InvalidInput(out_of_range)
    if value < low:
        if key == "trace_count":
            space = " " if grpc else ""
            raise InvalidInput(
                f"Unable to parse '{key}'. Expecting value >= {low}, got:{space}{text}"
            )
        raise InvalidInput(out_of_range)
    return value
