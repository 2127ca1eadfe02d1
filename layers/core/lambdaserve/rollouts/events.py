"""Every move of a rollout announced on EventBridge (source ``lambdaserve``, the detail-type
the move's kind: ``RolloutStepStarted``, ``BakeStarted``, ``RolloutPromoted``,
``RollbackStarted``, ``RollbackCompleted``, ``RolloutPaused``), with what triggered it and
the measurement it read. An announcement never undoes the move: a refusal is logged and
counted, the rollout stays where it moved."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from lambdaserve.rollouts.progress import Event, Rollout

SOURCE = "lambdaserve"

logger = logging.getLogger(__name__)


class RolloutAnnouncer(Protocol):
    def announce(self, rollout: Rollout, events: Sequence[Event]) -> None: ...


class Unannounced:
    """No bus configured: the rollout's status is the record."""

    def announce(self, rollout: Rollout, events: Sequence[Event]) -> None:
        return None


@dataclass
class EventBridgeRollouts:
    events: Any  # an EventBridge client
    bus: str
    failed: int = 0

    def announce(self, rollout: Rollout, events: Sequence[Event]) -> None:
        if not events:
            return
        entries = [_entry(rollout, event, self.bus) for event in events]
        try:
            answer = self.events.put_events(Entries=entries)  # at most 2 per move: one call
            refused = int(answer.get("FailedEntryCount", 0))
        except Exception as error:
            logger.warning("rollout events to %s not sent: %s", self.bus, error)
            refused = len(entries)
        self.failed += refused


def _entry(rollout: Rollout, event: Event, bus: str) -> dict[str, Any]:
    spec = rollout.spec
    detail = {
        "model": spec.model,
        "label": spec.label,
        "stable": spec.stable,
        "to": spec.to,
        "step": rollout.step + 1,
        "weight": event.weight,
        "phase": rollout.phase,
        "trigger": event.trigger,
        "measurement": event.measurement,
    }
    return {
        "Source": SOURCE,
        "DetailType": event.kind,
        "Detail": json.dumps(detail),
        "EventBusName": bus,
        "Resources": [],
    }
