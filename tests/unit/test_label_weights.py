"""A weighted label's routing (catalog/label_weights.py): shares, sticky keys, and checks."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from lambdaserve.catalog.label_weights import label_weights_from, parse_label_weights
from lambdaserve.errors import InvalidInput


def test_each_version_serves_its_share_of_draws() -> None:
    """Given a label weighted 90/10,
    When 10,000 requests without a sticky key draw a version,
    Then each version serves its weight within 1.5 points."""
    weights = parse_label_weights({"versions": {"1": 90, "2": 10}})
    draw = random.Random(7).random
    served = Counter(weights.pick(None, draw) for _ in range(10_000))
    assert abs(served[1] / 100 - 90) <= 1.5 and abs(served[2] / 100 - 10) <= 1.5, served


def test_a_sticky_key_meets_one_version_and_moves_only_toward_the_growing_one() -> None:
    """Given a sticky label at 90/10, then at 50/50, then at 90/10 again,
    When 5,000 keys are routed under each,
    Then a key meets the same version each time under the same weights, their shares are
    the weights', a key moves only from 1 to 2 as version 2 grows, and back as it shrinks."""
    keys = [f"user-{n}" for n in range(5_000)]
    canary = parse_label_weights({"versions": {"1": 90, "2": 10}, "sticky": "X-User"})
    half = parse_label_weights({"versions": {"1": 50, "2": 50}, "sticky": "x-user"})
    first = {key: canary.pick(key) for key in keys}
    assert first == {key: canary.pick(key) for key in keys}  # the same key, the same version
    assert abs(Counter(first.values())[2] / 50 - 10) <= 1.5
    later = {key: half.pick(key) for key in keys}
    assert abs(Counter(later.values())[2] / 50 - 50) <= 1.5
    moved = {(first[key], later[key]) for key in keys if first[key] != later[key]}
    assert moved == {(1, 2)}, moved  # nobody on the canary went back to stable
    assert {key: canary.pick(key) for key in keys} == first  # weights back: versions back


def test_weights_are_checked_saying_how_to_write_them() -> None:
    """Given bodies that are not weights,
    When each is parsed,
    Then each is refused saying what is wrong; a good one is stored and read back."""
    for body, said in [
        ({"versions": {}}, "maps each version"),
        ({"versions": {"one": 1}}, "not a version number"),
        ({"versions": {"1": -1}}, "whole number >= 0"),
        ({"versions": {"1": 0, "2": 0}}, "above 0"),
        ({"versions": {"1": 1}, "sticky": "no spaces"}, "names a request header"),
        ({"versions": {"1": 1}, "steps": [10]}, "unknown field"),
    ]:
        with pytest.raises(InvalidInput) as refused:
            parse_label_weights(body)
        assert said in refused.value.message, refused.value.message
    weights = parse_label_weights({"versions": {"2": 10, "1": 90}, "sticky": "X-User"})
    assert weights.to_json() == {"versions": {"1": 90, "2": 10}, "sticky": "x-user"}
    assert label_weights_from(weights.to_json()) == weights
