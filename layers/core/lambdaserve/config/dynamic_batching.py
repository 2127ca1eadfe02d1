"""Triton's ``dynamic_batching`` block as lambdaserve applies it, queue policy included.

The queue policy (``default_queue_policy``) bounds the dynamic batcher's queue of a model
version in long-running servers (``lambdaserve serve``, ``lambdaserve dev``): a request that
finds ``max_queue_size`` requests already waiting is refused at once (503, Triton's
"Exceeds maximum queue size"), and a request that waited longer than its timeout is
refused (REJECT) or let behind the ones still within theirs (DELAY). With
``priority_levels`` each level (1 the highest) is a queue of its own, with its own policy
(``priority_queue_policy``, else the default one); a request's ``priority`` parameter picks
its level (0, or above the levels: ``default_priority_level``), and batches take the higher
levels first. ``preserve_ordering``: responses leave in the order the requests came.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lambdaserve.errors import InvalidInput


@dataclass(frozen=True)
class QueuePolicy:
    max_queue_size: int = 0  # 0: unbounded, as in Triton
    default_timeout_s: float = 0.0  # 0: requests wait as long as it takes
    reject_on_timeout: bool = True  # timeout_action REJECT; False is DELAY
    allow_timeout_override: bool = False

    @property
    def times_out(self) -> bool:
        """Whether any request may have a queue timeout under this policy."""
        return self.default_timeout_s > 0 or self.allow_timeout_override

    def timeout_for(self, parameters: Mapping[str, Any]) -> float:
        """A request's queue timeout in seconds (0: none): its ``timeout`` parameter
        (microseconds) may shorten the default when the policy allows, never lengthen it."""
        asked = parameters.get("timeout") if self.allow_timeout_override else None
        if isinstance(asked, int) and not isinstance(asked, bool) and asked > 0:
            own = asked / 1e6
            return min(own, self.default_timeout_s) if self.default_timeout_s else own
        return self.default_timeout_s

    def to_document(self) -> dict[str, Any]:
        return {
            "max_queue_size": self.max_queue_size,
            "default_timeout_microseconds": round(self.default_timeout_s * 1e6),
            "timeout_action": "REJECT" if self.reject_on_timeout else "DELAY",
            "allow_timeout_override": self.allow_timeout_override,
        }


@dataclass(frozen=True)
class DynamicBatching:
    preferred_batch_size: tuple[int, ...] = ()
    max_queue_delay_microseconds: int = 0
    queue_policy: QueuePolicy = field(default_factory=QueuePolicy)
    priority_levels: int = 0  # 0: one level
    default_priority_level: int = 0
    # (level, its policy) where priority_queue_policy sets one
    priority_policies: tuple[tuple[int, QueuePolicy], ...] = ()
    preserve_ordering: bool = False

    def level_of(self, parameters: Mapping[str, Any]) -> int:
        """The request's priority level (0 where the model has no levels): its ``priority``
        parameter, or the default level for 0 and for a number above the levels, as Triton's
        ``InferenceRequest::SetPriority`` does."""
        if not self.priority_levels:
            return 0
        asked = parameters.get("priority")
        if (
            isinstance(asked, int)
            and not isinstance(asked, bool)
            and 0 < asked <= self.priority_levels
        ):
            return asked
        return self.default_priority_level

    def policy_of(self, level: int) -> QueuePolicy:
        for number, policy in self.priority_policies:
            if number == level:
                return policy
        return self.queue_policy

    def to_document(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "preferred_batch_size": list(self.preferred_batch_size),
            "max_queue_delay_microseconds": self.max_queue_delay_microseconds,
        }
        if self.queue_policy != QueuePolicy():
            document["default_queue_policy"] = self.queue_policy.to_document()
        if self.priority_levels:
            document["priority_levels"] = self.priority_levels
            document["default_priority_level"] = self.default_priority_level
        if self.priority_policies:
            document["priority_queue_policy"] = {
                str(level): policy.to_document() for level, policy in self.priority_policies
            }
        if self.preserve_ordering:
            document["preserve_ordering"] = True
        return document


def dynamic_batching_of(message: Any) -> DynamicBatching | None:
    """The ``dynamic_batching`` of a parsed ``ModelConfig`` message (None when absent)."""
    if not message.HasField("dynamic_batching"):
        return None
    batching = message.dynamic_batching
    levels = int(batching.priority_levels)
    default_level = int(batching.default_priority_level)
    if levels and not 0 < default_level <= levels:
        raise InvalidInput(
            f"dynamic_batching default_priority_level {default_level} must be between 1 and "
            f"priority_levels ({levels})"
        )
    for level in batching.priority_queue_policy:
        if not 0 < int(level) <= levels:
            raise InvalidInput(
                f"dynamic_batching priority_queue_policy names level {level}: levels go from 1 "
                f"to priority_levels ({levels})"
            )
    return DynamicBatching(
        preferred_batch_size=tuple(int(s) for s in batching.preferred_batch_size),
        max_queue_delay_microseconds=int(batching.max_queue_delay_microseconds),
        queue_policy=_queue_policy(batching.default_queue_policy),
        priority_levels=levels,
        default_priority_level=default_level,
        priority_policies=tuple(
            sorted((int(k), _queue_policy(v)) for k, v in batching.priority_queue_policy.items())
        ),
        preserve_ordering=bool(batching.preserve_ordering),
    )


def _queue_policy(policy: Any) -> QueuePolicy:
    return QueuePolicy(
        max_queue_size=int(policy.max_queue_size),
        default_timeout_s=int(policy.default_timeout_microseconds) / 1e6,
        # the enum's DELAY is 1; REJECT (0) is the default
        reject_on_timeout=int(policy.timeout_action) != 1,
        allow_timeout_override=bool(policy.allow_timeout_override),
    )
