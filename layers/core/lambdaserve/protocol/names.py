"""What a model name, a version and a version label may be, as every door checks them
(HTTP, gRPC, Lambda, the management API) and the repository's key layout accepts them."""

from __future__ import annotations

import re

from lambdaserve.errors import InvalidInput

# The rules as patterns both Python and the OpenAPI documents (ECMA-262) read the same way;
# Python's own ``$`` also matches before a final newline, so the compiled forms end in ``\Z``.
MODEL_NAME_PATTERN = "^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
VERSION_PATTERN = "^[1-9][0-9]{0,17}$"
LABEL_PATTERN = "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
# segments after /models/{m}/ that name something else, so they cannot be labels
_RESERVED_WHY = {
    "all": "TorchServe's /models/<model>/all names every version",
    "rollouts": "/models/<model>/rollouts names the model's rollouts",
}
RESERVED_LABELS = frozenset(_RESERVED_WHY)


def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern.removesuffix("$") + r"\Z")


MODEL_NAME_RE = _compiled(MODEL_NAME_PATTERN)
VERSION_RE = _compiled(VERSION_PATTERN)
LABEL_RE = _compiled(LABEL_PATTERN)


def is_valid_model_name(name: str) -> bool:
    return bool(MODEL_NAME_RE.match(name))


def check_model_name(name: str) -> str:
    """Return ``name`` or raise InvalidInput saying what a model name may contain."""
    if not is_valid_model_name(name):
        raise InvalidInput(
            f"invalid model name {name!r}: use 1-128 characters from [A-Za-z0-9_.-], "
            "starting with a letter or digit"
        )
    return name


def parse_version(text: str) -> int:
    """Parse a version segment or raise InvalidInput."""
    if not VERSION_RE.match(text):
        raise InvalidInput(f"invalid version {text!r}: versions are positive integers")
    return int(text)


def parse_version_ref(text: str) -> int | str:
    """A version as URLs may name it: a positive integer, or a label (``stable``, ``1.0``)."""
    if text.isdigit():
        return parse_version(text)
    return check_label(text)


def check_label(text: str) -> str:
    if text.isdigit() or not LABEL_RE.match(text):
        raise InvalidInput(
            f"invalid version {text!r}: a version is a positive integer, a label is a name "
            "such as stable, canary or 1.0 (letters, digits, '.', '_', '-'; not all digits)"
        )
    if text in RESERVED_LABELS:
        raise InvalidInput(
            f"invalid version {text!r}: {text!r} is not a label, {_RESERVED_WHY[text]}"
        )
    return text
