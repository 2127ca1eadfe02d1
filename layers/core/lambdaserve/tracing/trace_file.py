"""Where Triton-mode traces land, as Triton writes them: ``<file>`` holds one JSON array
that grows as settings flush their traces (a setting replaced at run time flushes what it
held), and is valid JSON after every flush: each write goes in before the closing ``]``,
so a reader never waits for shutdown; with a log frequency or a trace count, each flush is
its own array in the numbered file ``<file>.0``, ``<file>.1``, ... One object per path,
shared by every setting that names it. The writing happens on one thread of its own, in
order, never on the event loop that answers requests."""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from io import BufferedWriter
from pathlib import Path

log = logging.getLogger(__name__)
_WRITER: list[ThreadPoolExecutor] = []  # one thread for every trace file of the process
_WRITER_LOCK = threading.Lock()


class TraceFile:
    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._index = 0
        self._stream: BufferedWriter | None = None
        self._closed = False  # the main file's array ended: nothing more goes into it
        self._last: Future[None] | None = None

    def save(self, records: list[str], numbered: bool) -> None:
        """``records`` (JSON objects, each already text) into the numbered file next in
        turn, or appended to the main file's array; written soon, in the order saved."""
        if records:
            self._last = _writer().submit(self._write, ",".join(records), numbered)

    def flush(self) -> None:
        """Once this returns, what was saved is in the files."""
        if self._last is not None:
            self._last.result()

    def close(self) -> None:
        self.flush()
        with self._lock:
            self._closed = True
            if self._stream is not None:
                self._stream.close()
                self._stream = None

    def _write(self, text: str, numbered: bool) -> None:
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
                body = text.encode("utf-8")
                if self._stream is None:
                    self._stream = open(self.name, "wb")  # noqa: SIM115
                    self._stream.write(b"[" + body + b"]")
                else:
                    self._stream.seek(-1, os.SEEK_END)  # over the closing bracket
                    self._stream.write(b"," + body + b"]")
                self._stream.flush()
        except OSError as exc:  # a trace never fails a request; the log says why
            log.error("failed writing the trace file %s: %s", self.name, exc)


def _writer() -> ThreadPoolExecutor:
    with _WRITER_LOCK:
        if not _WRITER:
            _WRITER.append(ThreadPoolExecutor(1, thread_name_prefix="trace-file"))
        return _WRITER[0]
