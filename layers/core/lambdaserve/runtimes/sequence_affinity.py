"""Which instance each live sequence runs on, as Triton's direct strategy gives a sequence a
slot of one instance for its whole life: a model that keeps a sequence's state in its own
memory (``self`` in a Python model, a handler's cache) sees every step of it.

A pool of instances (``serving.instances``) or of worker processes (``workers.workforce``)
asks ``pinned()`` which instance the call's sequences hold before it takes one, and tells
``hold()`` which one it took. A START begins a sequence anew (any instance), an END lets it
go; a sequence that idles out is forgotten when newer ones push it past ``limit``. The
call's sequences are the ones ``runtimes.sequence_requests.in_sequences`` set around it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from lambdaserve.runtimes.sequence_requests import (
    SEQUENCE_END,
    SEQUENCE_START,
    SequenceOf,
    call_sequences,
)


class SequenceAffinity:
    """Correlation id → the index of the instance the sequence started on."""

    def __init__(self, limit: int = 65_536) -> None:
        self._limit = limit
        self._held: OrderedDict[int | str, int] = OrderedDict()
        self._lock = threading.Lock()

    def pinned(self) -> int | None:
        """The instance the call's sequences hold; None where any instance will do."""
        sequences = call_sequences()
        if not sequences:
            return None
        with self._lock:
            for correlation_id, flags in _live(sequences):
                if not flags & SEQUENCE_START and correlation_id in self._held:
                    return self._held[correlation_id]
        return None

    def hold(self, index: int) -> None:
        """The call runs on instance ``index``: its sequences stay there (until their END)."""
        sequences = call_sequences()
        if not sequences:
            return
        with self._lock:
            for correlation_id, flags in _live(sequences):
                if flags & SEQUENCE_END:
                    self._held.pop(correlation_id, None)
                    continue
                self._held[correlation_id] = index
                self._held.move_to_end(correlation_id)
            while len(self._held) > self._limit:
                self._held.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)


def _live(sequences: tuple[SequenceOf, ...]) -> list[SequenceOf]:
    # correlation id 0 (or "") is Triton's "no sequence"
    return [(c, f) for c, f in sequences if c not in (0, "")]
