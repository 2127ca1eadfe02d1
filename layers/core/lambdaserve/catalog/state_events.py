"""Version state-change events: what a deploy pipeline waits on instead of polling.

Every change of a version's state the catalog writes (LOADING, READY, UNAVAILABLE, and
REMOVED when its objects leave the repository) is announced by the process that wrote it,
after the write succeeded: on EventBridge, source ``lambdaserve``, detail-type
``Model Version State Change``. An announcement never fails the write: EventBridge's
refusals and errors are logged and counted (``failed``), the state stays written.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from lambdaserve.catalog.items import VersionRecord

SOURCE = "lambdaserve"
DETAIL_TYPE = "Model Version State Change"
REMOVED = "REMOVED"
_ENTRIES_PER_CALL = 10  # PutEvents' limit

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class VersionStateChange:
    model: str
    version: int
    state: str
    previous_state: str  # "" for a version seen the first time
    reason: str = ""
    digest: str = ""  # the version's sha256
    labels: tuple[str, ...] = ()  # the model's version labels naming this version


class StateAnnouncer(Protocol):
    def announce(self, changes: Sequence[VersionStateChange]) -> None: ...


class Silent:
    """No bus configured: state changes are only written."""

    def announce(self, changes: Sequence[VersionStateChange]) -> None:
        return None


@dataclass
class EventBridgeAnnouncer:
    """``PutEvents`` on ``bus`` (a name or an ARN) with an injected ``events`` client."""

    events: Any
    bus: str
    failed: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def announce(self, changes: Sequence[VersionStateChange]) -> None:
        entries = [_entry(change, self.bus) for change in changes]
        for start in range(0, len(entries), _ENTRIES_PER_CALL):
            chunk = entries[start : start + _ENTRIES_PER_CALL]
            try:
                answer = self.events.put_events(Entries=chunk)
                refused = int(answer.get("FailedEntryCount", 0))
            except Exception as error:  # the state is written: the event must not undo it
                logger.warning("state-change events to %s not sent: %s", self.bus, error)
                refused = len(chunk)
            if refused:
                with self._lock:
                    self.failed += refused


def _entry(change: VersionStateChange, bus: str) -> dict[str, Any]:
    detail = asdict(change)
    detail["labels"] = list(change.labels)
    return {
        "Source": SOURCE,
        "DetailType": DETAIL_TYPE,
        "Detail": json.dumps(detail),
        "EventBusName": bus,
        "Resources": [],
    }


def stated(record: VersionRecord) -> str:
    """The state a record announces: REMOVED once its objects left the repository."""
    return record.state if record.present else REMOVED


def announce_changes(
    announcer: StateAnnouncer,
    written: Sequence[tuple[VersionRecord, str, str]],
    version_labels: Callable[[str], Mapping[str, int]],
) -> None:
    """Tell ``announcer`` of each written (record, new state, previous state) whose state
    changed, with the model's labels naming the version (``version_labels``: per model)."""
    changed = [entry for entry in written if entry[1] != entry[2]]
    labels: dict[str, Mapping[str, int]] = {}
    for record, _, _ in changed:
        if record.model not in labels:
            labels[record.model] = version_labels(record.model)
    if changed:
        announcer.announce(
            [
                VersionStateChange(
                    model=record.model,
                    version=record.version,
                    state=state,
                    previous_state=previous,
                    reason=record.reason,
                    digest=record.sha256,
                    labels=tuple(
                        sorted(k for k, v in labels[record.model].items() if v == record.version)
                    ),
                )
                for record, state, previous in changed
            ]
        )
