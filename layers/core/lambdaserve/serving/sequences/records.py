"""A sequence's record, the store that keeps it, and the store's typed errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from lambdaserve.errors import Conflict


@dataclass(frozen=True)
class SequenceKey:
    """One sequence of one model version. ``sequence_id``: Triton's correlation ID, a
    uint64 or a string (1 and "1" are two sequences, as in Triton)."""

    model: str
    version: int
    sequence_id: int | str

    @property
    def text(self) -> str:
        kind = "S" if isinstance(self.sequence_id, str) else "U"
        return f"{kind}:{self.sequence_id}"


@dataclass(frozen=True)
class SequenceRecord:
    """What a sequence has done so far: ``step`` steps applied, the last at ``last_seen_us``
    (wall clock, µs), its implicit state tensors encoded (``b""``: none), and ``token``, a
    fresh value every write, which the next write is conditional on. ``ended``: the record
    an END left where the store keeps one (a sequence no step continues; a START may reuse
    its id, conditional on its token). ``state_ref``: where a store keeps a state too large
    for the record itself (an S3 key), as read; the store's own business."""

    step: int
    last_seen_us: int
    state: bytes
    token: str
    ended: bool = False
    state_ref: str = ""


class SequenceConflict(Conflict):
    """Another request changed the sequence between this step's read and its write."""


def conflict(key: SequenceKey) -> SequenceConflict:
    """What a store raises when the record moved on between a step's read and its write."""
    return SequenceConflict(
        f"sequence {key.sequence_id} of model '{key.model}' changed while this step ran "
        "(another request of the same sequence was applied first)"
    )


class SequenceStore(Protocol):
    """Sequence records, shared by every instance that serves the model."""

    def read(self, key: SequenceKey) -> SequenceRecord | None: ...

    def write(
        self, key: SequenceKey, record: SequenceRecord, expected: SequenceRecord | None
    ) -> None:
        """Store ``record`` if the stored one is still ``expected`` (None: there is none);
        else SequenceConflict."""

    def delete(self, key: SequenceKey, expected: SequenceRecord | None) -> None:
        """Remove the record if it is still ``expected`` (None: there is none); else
        SequenceConflict."""
