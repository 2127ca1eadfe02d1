"""Triton's ``instance_group``: how many instances of a version a serving process holds
(Triton's defaults where ``count`` is absent), and each instance's ``rate_limiter`` needs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lambdaserve.config.triton_proto import pb

# Triton's SetDefaultInstanceCount: a KIND_CPU group of these backends gets 2, others 1
_TWO_ON_CPU = {"onnxruntime", "tensorflow", "onnxruntime_onnx", "tensorflow_savedmodel"}


@dataclass(frozen=True)
class Resource:
    name: str
    count: int
    global_: bool = False


@dataclass(frozen=True)
class RateLimits:
    """An instance_group's ``rate_limiter``: what each of its instances needs to run, and its
    priority (executions x priority orders the instances ready to run)."""

    resources: tuple[Resource, ...] = ()
    priority: int = 1

    @property
    def weight(self) -> int:
        return max(self.priority, 1)  # Triton: a priority of 0 counts as 1

    def to_document(self) -> dict[str, Any]:
        """Triton's JSON form, as the config echo gives it."""
        resources = [
            {"name": r.name, "global": r.global_, "count": r.count} for r in self.resources
        ]
        return {"resources": resources, "priority": self.priority}


def instance_count_of(message: Any) -> int:
    """The groups' counts summed; a group without a count gets Triton's default."""
    groups = list(message.instance_group)
    if not groups:
        return 1  # lambdaserve's choice where no group is written: docs/from-triton.md
    return max(1, sum(g.count if g.count > 0 else _default_count(g, message) for g in groups))


def stated_count_of(message: Any) -> int:
    """The instance count where the config states one in any group (``instance_count_of``),
    else 0: on the Lambda path only a stated count bounds a version's executions."""
    if not any(g.count > 0 for g in message.instance_group):
        return 0
    return instance_count_of(message)


def rate_limits_of(message: Any) -> RateLimits | None:
    """The first group's ``rate_limiter`` (None where no group sets one)."""
    for group in message.instance_group:
        if group.HasField("rate_limiter"):
            limiter = group.rate_limiter
            return RateLimits(
                tuple(
                    Resource(r.name, int(r.count), bool(r.__getattribute__("global")))
                    for r in limiter.resources
                ),
                int(limiter.priority),
            )
    return None


def _default_count(group: Any, message: Any) -> int:
    cpu = group.kind == pb.ModelInstanceGroup.Kind.Value("KIND_CPU")
    return 2 if cpu and (message.backend in _TWO_ON_CPU or message.platform in _TWO_ON_CPU) else 1
