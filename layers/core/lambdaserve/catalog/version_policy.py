"""Version policy: which validated versions serve, and which one is the default.

Pure functions over version numbers; availability first: a newer version that
failed validation never takes the served one away, because policies are computed
over versions that validated only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from lambdaserve.config.model_config import VersionPolicy

READY = "READY"
LOADING = "LOADING"
UNAVAILABLE = "UNAVAILABLE"


@dataclass(frozen=True)
class VersionFacts:
    """What the registrar learned about one version, independent of policy."""

    version: int
    present: bool
    valid: bool
    validation_error: str = ""
    notes: str = ""


def served_versions(policy: VersionPolicy, valid_versions: Iterable[int]) -> frozenset[int]:
    """The versions ``policy`` selects among ``valid_versions``."""
    candidates = sorted(set(valid_versions))
    if policy.kind == "all":
        return frozenset(candidates)
    if policy.kind == "specific":
        return frozenset(v for v in candidates if v in policy.versions)
    return frozenset(candidates[-policy.num_versions :]) if candidates else frozenset()


def default_version(explicit: int | None, served: Iterable[int]) -> int | None:
    """The explicit default when it serves, else the highest served version."""
    served_set = set(served)
    if explicit is not None and explicit in served_set:
        return explicit
    return max(served_set) if served_set else None


def version_state(
    facts: VersionFacts,
    served: frozenset[int],
    policy: VersionPolicy,
    *,
    unloaded: bool = False,
    config_error: str = "",
    rejected_config: str = "",
) -> tuple[str, str]:
    """(state, reason) as Triton's repository index reports a version."""
    if not facts.present:
        # an upload that never became a version (a refused archive) keeps its reason
        return UNAVAILABLE, facts.validation_error or (
            "removed: the version has no objects in the repository"
        )
    if config_error:
        return UNAVAILABLE, f"model config is invalid: {config_error}"
    if not facts.valid:
        return UNAVAILABLE, facts.validation_error
    if unloaded:
        return UNAVAILABLE, "unloaded: load the model to serve it again"
    if facts.version not in served:
        return UNAVAILABLE, f"not selected by the version policy ({policy.describe()})"
    notes = [facts.notes] if facts.notes else []
    if rejected_config:
        notes.insert(0, f"serving the last good config; a new one was rejected: {rejected_config}")
    return READY, "; ".join(notes)
