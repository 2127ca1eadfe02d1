"""Strict parsing of what clients send: JSON nesting, header numbers, tensor ranks.

Every transport (the FastAPI routes, the ASGI front door, the Lambda direct path, the
management API) parses these in one place, so a hostile value is a 400 everywhere and
never reaches a recursion limit or an unchecked ``int()``.
"""

from __future__ import annotations

from typing import Any

import orjson

from lambdaserve.errors import InvalidInput, PayloadTooLarge

# Deep enough for any real config or parameters object, far below the interpreter's
# recursion limit and orjson's own (1024 to read, 255 to write).
MAX_JSON_DEPTH = 64
# A header number longer than this is not a length any body can have.
_MAX_DIGITS = 15
# What a JSON document's leaves are, as orjson decodes them (exact types: no subclasses)
_SCALARS = frozenset({int, float, str, bool, type(None)})


def header_int(name: str, raw: str | None) -> int | None:
    """A non-negative integer header (ASCII digits only), or None when absent."""
    if raw is None:
        return None
    text = raw.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > _MAX_DIGITS:
        shown = raw if len(raw) <= 40 else raw[:40] + "..."
        raise InvalidInput(
            f"{name} must be a non-negative integer of at most {_MAX_DIGITS} ASCII digits, "
            f"got {shown!r}"
        )
    return int(text)


def json_document(raw: bytes, what: str = "the request body") -> Any:
    """Decode JSON with the nesting limit; a 400 that says what is wrong otherwise."""
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if "depth" in str(exc) or "recursion" in str(exc).lower():
            raise InvalidInput(
                f"{what} nests deeper than {MAX_JSON_DEPTH} levels; flatten it"
            ) from None
        raise InvalidInput(f"{what} is not valid JSON: {exc}") from None
    # A document cannot nest deeper than it has opening brackets: most requests (a few flat
    # tensors) have a handful, counted in C, and need no walk over their values.
    if not isinstance(raw, bytes | bytearray) or (
        raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH
    ):
        check_depth(document, what)
    return document


def check_depth(value: Any, what: str, limit: int = MAX_JSON_DEPTH) -> None:
    """Refuse containers nested deeper than ``limit`` (iteratively: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        current, depth = stack.pop()
        if isinstance(current, dict):
            children: Any = current.values()
        elif isinstance(current, list):
            children = current
        else:
            continue
        if depth > limit:
            raise InvalidInput(f"{what} nests deeper than {limit} levels; flatten it")
        # A list of scalars (a tensor's row: hundreds of numbers) has no children to walk:
        # its element types are collected in C, not tested one by one in Python.
        if children is current and _SCALARS.issuperset(map(type, current)):
            continue
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))


def response_too_large(size: int, limit: int) -> PayloadTooLarge:
    """A synchronous answer over Lambda's limit (6 MB each way), and what to do instead."""
    return PayloadTooLarge(
        f"the response is {size} bytes, over the {limit}-byte limit of a synchronous answer "
        "(a Lambda invocation returns at most 6 MB): ask for fewer rows or outputs, for binary "
        "outputs (about 4x smaller than JSON), or send the request with `Prefer: respond-async` "
        "(results of any size are kept in S3)"
    )
