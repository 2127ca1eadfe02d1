from __future__ import annotations

from lambdaserve.catalog.version_policy import (
    READY,
    UNAVAILABLE,
    VersionFacts,
    default_version,
    served_versions,
    version_state,
)
from lambdaserve.config.model_config import VersionPolicy


def test_latest_n_serves_the_newest_valid_versions():
    assert served_versions(VersionPolicy("latest", 1), [1, 2, 3]) == {3}
    assert served_versions(VersionPolicy("latest", 2), [1, 2, 3]) == {2, 3}
    assert served_versions(VersionPolicy("latest", 5), [1, 2]) == {1, 2}
    assert served_versions(VersionPolicy("latest", 1), []) == frozenset()


def test_all_and_specific():
    assert served_versions(VersionPolicy("all"), [1, 4, 9]) == {1, 4, 9}
    assert served_versions(VersionPolicy("specific", versions=(1, 3)), [1, 2, 4]) == {1}


def test_a_failed_newer_version_does_not_take_the_served_one_away():
    # Given versions 1..3 where 3 failed validation, only valid versions are candidates
    valid = [v for v, ok in ((1, True), (2, True), (3, False)) if ok]
    # Then latest 1 still serves version 2
    assert served_versions(VersionPolicy(), valid) == {2}


def test_default_version_is_explicit_if_served_else_highest():
    assert default_version(2, {1, 2, 3}) == 2
    assert default_version(5, {1, 2, 3}) == 3
    assert default_version(None, {1, 2}) == 2
    assert default_version(None, set()) is None


def test_states_and_reasons_follow_triton_repository_index():
    policy = VersionPolicy("latest", 1)
    ok = VersionFacts(2, present=True, valid=True)
    assert version_state(ok, frozenset({2}), policy) == (READY, "")
    state, reason = version_state(VersionFacts(1, True, True), frozenset({2}), policy)
    assert (state, reason) == (UNAVAILABLE, "not selected by the version policy (latest 1)")
    state, reason = version_state(VersionFacts(3, True, False, "bad bytes"), frozenset(), policy)
    assert (state, reason) == (UNAVAILABLE, "bad bytes")
    assert version_state(VersionFacts(4, False, False), frozenset(), policy)[1].startswith(
        "removed"
    )
    assert version_state(ok, frozenset({2}), policy, unloaded=True)[1].startswith("unloaded")
    assert "config" in version_state(ok, frozenset({2}), policy, config_error="x")[1]
