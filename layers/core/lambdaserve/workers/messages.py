"""The worker protocol, defined once: every message between the serving process and a worker
child (its op, its kinds, the keys of its reply), as small builders the senders call, and
parsed forms and names the readers read by. Tensors and bytes never travel here: the
messages carry their descriptors in the shared areas (``workers.shared_area``), framed by
``workers.channel``.

The serving process sends ``load`` (first, once), then one of ``run``, ``rows`` and
``stream`` per call, and ``stop``. While a call runs, the child may send ``bls`` (a Python
model's call to another model, of kind ``one``, ``all`` or ``ready``), ``node`` (a workflow's
model node) and, for ``stream``, ``response``s; each is answered, or read, before the
call's own reply, the one message without an op.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from lambdaserve.workers.channel import error_document

Message = dict[str, Any]

OP = "op"
# keys of replies (and of the ``bls`` / ``node`` answers)
ERROR, OUTPUTS, RESULTS, ANSWERS, ANSWER = "error", "outputs", "results", "answers", "answer"
RESPONSES, READY, BATCHING, METRICS, RETIRE = "responses", "ready", "batching", "metrics", "retire"


class Op(StrEnum):
    LOAD = "load"  # serving -> child: the version to load (its spec)
    RUN = "run"  # serving -> child: tensor requests (``run_requests``)
    ROWS = "rows"  # serving -> child: a TorchServe handler's rows
    STREAM = "stream"  # serving -> child: a decoupled model's one request
    STOP = "stop"  # serving -> child: finalize and exit
    BLS = "bls"  # child -> serving, mid-call: a Python model calls another model
    NODE = "node"  # child -> serving, mid-call: a workflow's model node
    RESPONSE = "response"  # child -> serving, mid-call: one of a decoupled model's responses


class BlsKind(StrEnum):
    ONE = "one"  # ``exec()``: one response
    ALL = "all"  # ``exec(decoupled=True)``: every response
    READY = "ready"  # ``is_model_ready``


# -- the serving process's messages ----------------------------------------------------------
def load(
    *,
    model: str,
    version: int,
    backend: str,
    model_path: str,
    config: dict[str, Any],
    signature: dict[str, Any],
) -> Message:
    return {
        OP: Op.LOAD,
        "model": model,
        "version": version,
        "backend": backend,
        "model_path": model_path,
        "config": config,
        "signature": signature,
    }


def run(
    requests: Sequence[tuple[list[Any], Sequence[str]]],
    ids: Sequence[str],
    sequences: Sequence[tuple[int | str, int]] = (),
    parameters: Sequence[Mapping[str, Any]] = (),
) -> Message:
    """``requests``: each one's input descriptors and requested output names; ``sequences``:
    each one's (correlation id, flags) where they are steps of sequences; ``parameters``:
    each one's own, where any request had some."""
    encoded = [{"inputs": inputs, OUTPUTS: list(names)} for inputs, names in requests]
    message = {OP: Op.RUN, "requests": encoded, "ids": list(ids), "sequences": list(sequences)}
    if parameters:
        message["parameters"] = [dict(p) for p in parameters]
    return message


def rows(
    encoded: list[list[list[Any]]], headers: list[dict[str, str]], ids: Sequence[str]
) -> Message:
    """``encoded``: each row's fields, as ``field`` writes them."""
    return {OP: Op.ROWS, "rows": encoded, "headers": headers, "ids": list(ids)}


def stream(inputs: list[Any], outputs: Sequence[str], ids: Sequence[str]) -> Message:
    return {OP: Op.STREAM, "inputs": inputs, OUTPUTS: list(outputs), "ids": list(ids)}


def stop() -> Message:
    return {OP: Op.STOP}


def bls_responses(documents: list[dict[str, Any]]) -> Message:
    """The answer to a ``bls`` call of kind one or all: ``produced`` / ``bls_error``."""
    return {RESPONSES: documents}


def produced(descriptors: list[Any]) -> dict[str, Any]:
    """Tensors written in an area: one ``run`` result, one ``bls`` response."""
    return {OUTPUTS: descriptors}


def bls_error(message: str) -> dict[str, Any]:
    return {ERROR: message}


def bls_ready(ready: bool) -> Message:
    return {READY: ready}


def node_answer(offset: int, length: int, content_type: str, status: int) -> Message:
    return {ANSWER: [offset, length, content_type, status]}


def failed(exc: BaseException) -> Message:
    """A reply (or a node's answer) saying what the code raised, as a typed document."""
    return {ERROR: error_document(exc)}


# -- the child's messages ----------------------------------------------------------------------
def loaded(batching: tuple[Any, ...] | None) -> Message:
    """``batching``: a handler's FrontendBatching, its fields in order (batchSize,
    maxBatchDelay in s, sequenceBatching and its sequences' limits)."""
    return {"ok": True, BATCHING: list(batching) if batching else None}


def results(documents: list[dict[str, Any]]) -> Message:
    """The reply to ``run``: per request ``produced(descriptors)`` or ``failed(exc)``."""
    return {RESULTS: documents}


def answers(descriptors: list[list[Any]]) -> Message:
    """The reply to ``rows``: per row ``[offset, length, content_type, status]``."""
    return {ANSWERS: descriptors}


def done() -> Message:
    """The reply to ``stream``, after its ``response``s."""
    return {"done": True}


def response(outputs: list[Any]) -> Message:
    return {OP: Op.RESPONSE, OUTPUTS: outputs}


def bls(
    kind: BlsKind,
    model: str,
    version: int | None,
    *,
    inputs: list[Any] | None = None,
    outputs: Sequence[str] = (),
    timeout_us: int = 0,
    parameters: Mapping[str, Any] | None = None,
    request_id: str = "",
) -> Message:
    return {
        OP: Op.BLS,
        "kind": kind,
        "model": model,
        "version": version,
        "inputs": inputs or [],
        OUTPUTS: list(outputs),
        "timeout": timeout_us,
        "parameters": dict(parameters or {}),
        "id": request_id,
    }


def node(model: str, fields: list[list[Any]], headers: Mapping[str, str]) -> Message:
    return {OP: Op.NODE, "model": model, "fields": fields, "headers": dict(headers)}


# -- a field of a row or a node: bytes in an area, anything else as JSON ------------------------
def field(key: str, value: Any, write_bytes: Callable[[bytes], int]) -> list[Any]:
    """``[key, {"b": [offset, length]}]`` for bytes (written by ``write_bytes``, which gives
    the offset), else ``[key, {"j": value}]``."""
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
        return [key, {"b": [write_bytes(data), len(data)]}]
    return [key, {"j": value}]


def field_value(encoded: Mapping[str, Any], read_bytes: Callable[[int, int], bytes]) -> Any:
    return read_bytes(*encoded["b"]) if "b" in encoded else encoded["j"]


# -- messages as their readers see them ------------------------------------------------------
@dataclass(frozen=True)
class Load:
    model: str
    version: int
    backend: str
    model_path: str
    config: dict[str, Any]
    signature: dict[str, Any]

    @classmethod
    def of(cls, message: Message) -> Load:
        keys = ("model", "version", "backend", "model_path", "config", "signature")
        return cls(*(message[k] for k in keys))


@dataclass(frozen=True)
class Run:
    requests: tuple[tuple[list[Any], list[str]], ...]  # input descriptors, output names
    ids: tuple[str, ...]
    # (correlation id, flags) per request where they are steps of sequences; else empty
    sequences: tuple[tuple[int | str, int], ...] = ()
    parameters: tuple[dict[str, Any], ...] = ()  # per request, where any had some

    @classmethod
    def of(cls, message: Message) -> Run:
        requests = tuple((r["inputs"], r[OUTPUTS]) for r in message["requests"])
        sequences = tuple((c, int(f)) for c, f in message.get("sequences") or ())
        parameters = tuple(message.get("parameters") or ())
        return cls(requests, tuple(message.get("ids", ())), sequences, parameters)


@dataclass(frozen=True)
class Rows:
    rows: tuple[list[list[Any]], ...]  # each row's fields, as ``field`` writes them
    headers: tuple[dict[str, str], ...]
    ids: tuple[str, ...]

    @classmethod
    def of(cls, message: Message) -> Rows:
        rows, headers = tuple(message["rows"]), tuple(message["headers"])
        return cls(rows, headers, tuple(message.get("ids", ())))


@dataclass(frozen=True)
class Stream:
    inputs: list[Any]
    outputs: list[str]
    ids: tuple[str, ...]

    @classmethod
    def of(cls, message: Message) -> Stream:
        return cls(message["inputs"], message[OUTPUTS], tuple(message.get("ids", ())))


@dataclass(frozen=True)
class Bls:
    kind: BlsKind
    model: str
    version: int | None
    inputs: list[Any]
    outputs: list[str]
    timeout_us: int
    parameters: dict[str, Any]
    request_id: str

    @classmethod
    def of(cls, message: Message) -> Bls:
        return cls(
            BlsKind(message.get("kind", BlsKind.ONE)),
            message["model"],
            message.get("version") or None,
            message.get("inputs") or [],
            list(message.get(OUTPUTS) or ()),
            int(message.get("timeout") or 0),
            dict(message.get("parameters") or {}),
            str(message.get("id") or ""),
        )


@dataclass(frozen=True)
class Node:
    model: str
    fields: list[list[Any]]
    headers: dict[str, str]

    @classmethod
    def of(cls, message: Message) -> Node:
        return cls(message["model"], message["fields"], message.get("headers") or {})
