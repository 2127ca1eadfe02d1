"""Triton's response cache: a model whose config says ``response_cache { enable: true }``
answers a request it has answered before from the cache, without running (or loading) it.

The key is Triton's (the model, the version, every input's name, datatype, shape and bytes,
the outputs asked for and the parameters that change the answer: classification counts,
the request's own parameters) plus the version's fingerprint: the catalog's digests of its
files and its effective config, so a new version, new files or a new config never meet an
old entry. What is cached is the domain answer (the output tensors), not a door's bytes:
every door (HTTP JSON, binary tensors, gRPC, TorchServe's, TF Serving's, Paddle's) encodes a
hit exactly as it encodes the computed answer. Only successes are stored, and only entries
within ``max_entry_bytes``.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import orjson

from lambdaserve.metrics.stats import StatsRegistry
from lambdaserve.protocol.v2 import InferRequest
from lambdaserve.serving.response_cache.codec import (
    MalformedEntry,
    decode_outputs,
    decode_sequence,
    encode_outputs,
    encode_sequence,
    tensor_bytes,
)
from lambdaserve.serving.response_cache.tiers import CacheTier, LocalTier
from lambdaserve.serving.version_resolver import ServedVersion

logger = logging.getLogger(__name__)

KEY_PREFIX = b"lambdaserve:response:"
# Request parameters that only choose how the answer is written or scheduled, never what it is
_ENCODING_ONLY = frozenset({"binary_data_output", "timeout", "priority"})
Outputs = dict[str, np.ndarray[Any, Any]]
T = TypeVar("T")

# What the access log writes beside a request's line ("hit" or "miss"); the middleware puts a
# fresh list here per request, and the cache (maybe on another thread) appends to it.
outcome_note: ContextVar[list[str] | None] = ContextVar("response_cache_outcome", default=None)


@dataclass(frozen=True)
class Lookup:
    """One request's turn at the cache: its key, the cached outputs (None: a miss), and
    when it started (a miss's duration runs to the end of the insertion)."""

    key: bytes
    outputs: Outputs | None
    started_ns: int
    lookup_ns: int
    # a decoupled model's cached responses, in order (None: a miss)
    responses: list[Outputs] | None = None


class ResponseCache:
    """The tiers in order (local first, then shared): a hit in a later tier fills the
    earlier ones; a store writes every tier."""

    def __init__(self, tiers: Sequence[CacheTier], max_entry_bytes: int) -> None:
        self.tiers = tuple(tiers)
        self.max_entry_bytes = max_entry_bytes
        self._digests: dict[int, tuple[ServedVersion, bytes]] = {}
        self._lock = threading.Lock()

    @property
    def blocking(self) -> bool:
        """Whether a lookup may wait on the network (the shared tier)."""
        return any(not isinstance(tier, LocalTier) for tier in self.tiers)

    def lookup(
        self, served: ServedVersion, request: InferRequest, stats: StatsRegistry
    ) -> Lookup | None:
        """None when ``served`` does not cache; else the lookup, counted as a hit (and a
        success, as Triton counts hits) or a miss."""
        if not served.config.response_cache:
            return None
        started = time.perf_counter_ns()
        key = request_key(self.version_digest(served), request)
        decoupled = served.config.decoupled
        found = self._get(key, decode_sequence if decoupled else decode_outputs)
        done = time.perf_counter_ns()
        if found is not None:
            stats.record_cache_hit(served.model, served.version, done - started)
        else:
            stats.record_cache_miss(served.model, served.version, done - started)
        note = outcome_note.get()
        if note is not None:
            note.append("hit" if found is not None else "miss")
        if decoupled:  # its entries are response lists, whichever door stored them
            responses = found if isinstance(found, list) else None
            single = responses[0] if responses is not None and len(responses) == 1 else None
            return Lookup(key, single, started, done - started, responses)
        return Lookup(key, found if isinstance(found, dict) else None, started, done - started)

    def answer_before_queueing(
        self, served: ServedVersion, request: InferRequest, stats: StatsRegistry
    ) -> Outputs | None:
        """A queued request's cached outputs, looked up before it queues: a hit is counted
        here, a miss is not (the batch that runs it looks up, and counts, once more)."""
        if not served.config.response_cache or served.config.decoupled:
            return None
        started = time.perf_counter_ns()
        found = self._get(request_key(self.version_digest(served), request), decode_outputs)
        if not isinstance(found, dict):
            return None
        stats.record_cache_hit(served.model, served.version, time.perf_counter_ns() - started)
        return found

    def store(
        self,
        served: ServedVersion,
        lookup: Lookup,
        outputs: Mapping[str, Any],
        stats: StatsRegistry,
    ) -> None:
        """Keep a successful answer (Triton's miss duration covers the insertion too); a
        decoupled model's as a list of one response, the form its stream reads."""
        started = time.perf_counter_ns()
        if served.config.decoupled:
            entry = encode_sequence([dict(outputs)])
        else:
            entry = encode_outputs(outputs)
        self._put(served, lookup, entry, stats, started)

    def store_sequence(
        self,
        served: ServedVersion,
        lookup: Lookup,
        responses: list[Outputs],
        stats: StatsRegistry,
    ) -> None:
        """Keep a decoupled model's every response to a request that completed."""
        started = time.perf_counter_ns()
        self._put(served, lookup, encode_sequence(responses), stats, started)

    def _put(
        self,
        served: ServedVersion,
        lookup: Lookup,
        entry: bytes,
        stats: StatsRegistry,
        started: int,
    ) -> None:
        if len(entry) > self.max_entry_bytes:
            stats.record_cache_too_large(served.model, served.version)
        else:
            for tier in self.tiers:
                tier.put(lookup.key, entry)
        stats.record_cache_insert(served.model, served.version, time.perf_counter_ns() - started)

    def version_digest(self, served: ServedVersion) -> bytes:
        """What identifies the version's answers: computed once per served version."""
        with self._lock:
            known = self._digests.get(id(served))
            if known is not None and known[0] is served:
                return known[1]
        digest = version_digest(served)
        with self._lock:
            if len(self._digests) > 1024:
                self._digests.clear()
            self._digests[id(served)] = (served, digest)
        return digest

    def _get(self, key: bytes, decode: Callable[[bytes], T]) -> T | None:
        for index, tier in enumerate(self.tiers):
            entry = tier.get(key)
            if entry is None:
                continue
            try:
                outputs = decode(entry)
            except MalformedEntry as exc:
                logger.warning(
                    "a %s response cache entry is unreadable (%s): a miss", tier.name, exc
                )
                return None
            for earlier in self.tiers[:index]:
                earlier.put(key, entry)
            return outputs
        return None


def version_digest(served: ServedVersion) -> bytes:
    """The model, the version, the catalog's digests of its files and the effective config
    (labels included): any change to what the version answers changes this."""
    material = {
        "model": served.model,
        "version": served.version,
        "fingerprint": served.record.fingerprint,
        "sha256": served.record.sha256,
        "files": sorted(
            str(f.get("sha256", "")) + str(f.get("path", "")) for f in served.record.files
        ),
        "runtime": served.record.runtime,
        "config": served.config.to_triton_json(),
        "labels": {name: list(labels) for name, labels in sorted(served.class_labels.items())},
        "parameters": list(served.config.parameters),
    }
    return hashlib.sha256(orjson.dumps(material, option=orjson.OPT_SORT_KEYS)).digest()


def request_key(version: bytes, request: InferRequest) -> bytes:
    """Triton's request hash over what changes the answer, under the version's digest."""
    hasher = hashlib.sha256(version)
    for tensor in sorted(request.inputs, key=lambda t: t.name):
        header = orjson.dumps([tensor.name, tensor.datatype, list(tensor.shape)])
        hasher.update(len(header).to_bytes(4, "little") + header)
        raw = tensor_bytes(tensor.data)
        hasher.update(len(raw).to_bytes(8, "little"))
        hasher.update(raw)
    # in the order asked: the answer lists its outputs in that order
    asked = [[o.name, o.classification] for o in request.outputs]
    parameters = {k: v for k, v in request.parameters.items() if k not in _ENCODING_ONLY}
    hasher.update(orjson.dumps([asked, parameters], option=orjson.OPT_SORT_KEYS))
    return KEY_PREFIX + hasher.hexdigest().encode()
