"""A weighted version label: ``{"versions": {"1": 90, "2": 10}, "sticky": "x-user-id"}``, a
label that names several versions, each for its share of the requests that ask for it.

Without ``sticky``, each request draws its version. With it, the request's value of that
header (a user or session id) hashes to a point in [0, 1): the versions hold consecutive
spans of that line in version order, each as wide as its share, so a key meets the version
whose span holds its point. A key therefore meets the same version while the weights hold,
and moves only when a span boundary moves past its point (a canary's span grows from the
top: keys move from stable to canary, never back, as its weight rises). A request without the
header draws, as without ``sticky``.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lambdaserve.errors import InvalidInput

_HEADER = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")  # an HTTP field name (RFC 9110)


@dataclass(frozen=True)
class Shadow:
    """A version that sees a sampled copy of the label's requests, its answers never sent."""

    version: int
    percent: float

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "percent": self.percent}


@dataclass(frozen=True)
class LabelWeights:
    versions: tuple[tuple[int, int], ...]  # (version, weight), in version order
    sticky: str | None = None  # the header whose value keeps a caller on one version
    shadow: Shadow | None = None

    @property
    def total(self) -> int:
        return sum(weight for _, weight in self.versions)

    def shares(self) -> dict[str, int]:
        """The weights as the catalog stores and the API shows them."""
        return {str(version): weight for version, weight in self.versions}

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {"versions": self.shares()}
        if self.sticky:
            document["sticky"] = self.sticky
        if self.shadow:
            document["shadow"] = self.shadow.to_json()
        return document

    def pick(self, key: str | None, draw: Callable[[], float] = random.random) -> int:
        """The version for a request whose sticky value is ``key`` (None: it draws)."""
        point = _point(key) if key else draw()
        bound, total = 0, self.total
        for version, weight in self.versions:
            bound += weight
            if point * total < bound:
                return version
        return self.versions[-1][0]  # a point of 1.0 from a draw that cannot give one


def _point(key: str) -> float:
    """Where ``key`` falls in [0, 1): the same for every instance and every process."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def parse_label_weights(document: Mapping[str, Any]) -> LabelWeights:
    """A PUT body's weights, or InvalidInput saying what is wrong and how to write it."""
    example = (
        '{"versions": {"1": 90, "2": 10}, "sticky": "x-user-id", '
        '"shadow": {"version": 3, "percent": 10}}'
    )
    given = document.get("versions")
    if not isinstance(given, Mapping) or not given:
        raise InvalidInput(f'"versions" maps each version to its weight, e.g. {example}')
    versions: list[tuple[int, int]] = []
    for version, weight in given.items():
        if not str(version).isdigit() or int(version) < 1:
            raise InvalidInput(f"{version!r} is not a version number; e.g. {example}")
        if isinstance(weight, bool) or not isinstance(weight, int) or weight < 0:
            raise InvalidInput(f"the weight of version {version} must be a whole number >= 0")
        versions.append((int(version), weight))
    if not any(weight for _, weight in versions):
        raise InvalidInput("at least one version needs a weight above 0")
    sticky = document.get("sticky")
    if sticky is not None and (not isinstance(sticky, str) or not _HEADER.match(sticky)):
        raise InvalidInput(f'"sticky" names a request header, e.g. "x-user-id"; got {sticky!r}')
    unknown = sorted(set(document) - {"versions", "sticky", "shadow"})
    if unknown:
        raise InvalidInput(
            f"unknown field(s) {unknown}: a weighted label has versions, sticky, shadow"
        )
    shadow = _shadow(document.get("shadow"), example)
    if shadow is not None and any(v == shadow.version and w for v, w in versions):
        raise InvalidInput(f"version {shadow.version} serves the label: it cannot shadow it")
    return LabelWeights(tuple(sorted(versions)), sticky.lower() if sticky else None, shadow)


def _shadow(given: Any, example: str) -> Shadow | None:
    if given is None:
        return None
    said = f'"shadow" is {{"version": N, "percent": 0-100}}; e.g. {example}'
    if not isinstance(given, Mapping) or set(given) - {"version", "percent"}:
        raise InvalidInput(said)
    version, percent = given.get("version"), given.get("percent", 100)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise InvalidInput(said)
    if isinstance(percent, bool) or not isinstance(percent, int | float):
        raise InvalidInput(said)
    if not 0 < percent <= 100:
        raise InvalidInput(said)
    return Shadow(version, float(percent))


def label_weights_from(stored: Mapping[str, Any]) -> LabelWeights:
    """A weighted label as the catalog stored it (checked when it was set)."""
    versions = tuple(sorted((int(v), int(w)) for v, w in stored["versions"].items()))
    shadow = stored.get("shadow")
    found = Shadow(int(shadow["version"]), float(shadow["percent"])) if shadow else None
    return LabelWeights(versions, stored.get("sticky"), found)
