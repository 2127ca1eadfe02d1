"""Triton's ``dynamic_batching`` block as lambdaserve applies it, queue policy included.

The queue policy (``default_queue_policy``) bounds the dynamic batcher's queue of a model
version in long-running servers (``lambdaserve serve``, ``lambdaserve dev``): a request that
finds ``max_queue_size`` requests already waiting is refused at once (503, Triton's
"Exceeds maximum queue size"), and a request that waited longer than its timeout is
refused (REJECT) or let behind the ones still within theirs (DELAY). Priority levels are
not applied (one level per model): ``config.support`` says so in the catalog entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


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

    def to_document(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "preferred_batch_size": list(self.preferred_batch_size),
            "max_queue_delay_microseconds": self.max_queue_delay_microseconds,
        }
        if self.queue_policy != QueuePolicy():
            document["default_queue_policy"] = self.queue_policy.to_document()
        return document


def dynamic_batching_of(message: Any) -> DynamicBatching | None:
    """The ``dynamic_batching`` of a parsed ``ModelConfig`` message (None when absent)."""
    if not message.HasField("dynamic_batching"):
        return None
    batching = message.dynamic_batching
    policy = batching.default_queue_policy
    return DynamicBatching(
        preferred_batch_size=tuple(int(s) for s in batching.preferred_batch_size),
        max_queue_delay_microseconds=int(batching.max_queue_delay_microseconds),
        queue_policy=QueuePolicy(
            max_queue_size=int(policy.max_queue_size),
            default_timeout_s=int(policy.default_timeout_microseconds) / 1e6,
            # the enum's DELAY is 1; REJECT (0) is the default
            reject_on_timeout=int(policy.timeout_action) != 1,
            allow_timeout_override=bool(policy.allow_timeout_override),
        ),
    )
