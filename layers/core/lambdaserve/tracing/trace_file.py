"""Where Triton-mode traces land, as Triton writes them: ``<file>`` holds one JSON array
that grows as settings flush their traces (opened at the first write, closed with ``]`` at
shutdown); with a log frequency or a trace count, each flush is its own array in the
numbered file ``<file>.0``, ``<file>.1``, ... One object per path, shared by every setting
that names it."""

from __future__ import annotations

import logging
import threading
from io import TextIOWrapper
from pathlib import Path

log = logging.getLogger(__name__)


class TraceFile:
    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._index = 0
        self._stream: TextIOWrapper | None = None
        self._closed = False  # the main file's array ended: nothing more goes into it

    def save(self, records: list[str], numbered: bool) -> None:
        """``records`` (JSON objects, each already text) into the numbered file next in
        turn, or appended to the main file's array."""
        if not records:
            return
        text = ",".join(records)
        try:
            with self._lock:
                if numbered:
                    path = Path(f"{self.name}.{self._index}")
                    self._index += 1
                    path.write_text(f"[{text}]", encoding="utf-8")
                    return
                if self._closed:  # a trace that ended after shutdown: never over the file
                    log.warning("a trace of %s ended after its file closed", self.name)
                    return
                if self._stream is None:
                    self._stream = open(self.name, "w", encoding="utf-8")  # noqa: SIM115
                    self._stream.write("[")
                else:
                    self._stream.write(",")
                self._stream.write(text)
                self._stream.flush()
        except OSError as exc:  # a trace never fails a request; the log says why
            log.error("failed writing the trace file %s: %s", self.name, exc)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._stream is not None:
                self._stream.write("]")
                self._stream.close()
                self._stream = None
