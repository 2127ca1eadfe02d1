"""Triton's ``instance_group`` count for the tensor runtimes: N instances of one version in a
serving process (an ONNX Runtime or OpenVINO session, a TorchScript module, a Paddle
predictor each), every execution on an instance of its own, so up to N run at once.

The pool is a ``LoadedModel``: a run takes the free instance with the fewest executions
(a sequence's step: the instance its sequence started on, ``runtimes.sequence_affinity``),
runs, and gives it back (the rate limiter, ``serving.rate_limiter``, admits no more
executions at once than there are instances). TorchServe's scaling
(``PUT /models/m?min_worker=``) sets the count, as it sets a handler's workers.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lambdaserve.runtimes.base import LoadedModel
from lambdaserve.runtimes.sequence_affinity import SequenceAffinity
from lambdaserve.tensors.signature import Arrays


@dataclass
class Instance:
    """One instance: its model, when it started, how many executions it ran."""

    index: int
    model: LoadedModel
    started_at: float = field(default_factory=time.time)
    executions: int = 0
    busy: bool = False
    retired: bool = False  # scaled down while running: closed once it is given back


class InstancePool:
    """N instances of one loaded version; ``run`` holds one of them for its execution."""

    worker_count = 0  # not worker processes: ModelServer runs a pool from its own threads

    def __init__(
        self,
        make: Callable[[], LoadedModel],
        count: int,
        *,
        first: LoadedModel | None = None,
        label: str = "",
    ) -> None:
        self._make = make
        self._label = label
        self._changed = threading.Condition()
        self._instances: list[Instance] = []
        self._next = 0
        self._affinity = SequenceAffinity()
        self._choosy = 0  # runs waiting for one instance (their sequence's): wake them all
        self.broken = ""
        self.target = max(1, count)
        if first is not None:
            self._instances.append(Instance(0, first))
            self._next = 1
        self._grow(self.target - len(self._instances))
        self.device = self._instances[0].model.device

    @property
    def instance_count(self) -> int:
        with self._changed:
            return len(self._instances)

    def run(self, inputs: Mapping[str, np.ndarray[Any, Any]], outputs: Sequence[str]) -> Arrays:
        instances = self._instances
        if len(instances) == 1:
            # one instance (no count written): the batcher runs one execution at a time, as
            # before pools; the instance's own runtime is thread-safe for the other callers
            return instances[0].model.run(inputs, outputs)
        instance = self._take(self._affinity.pinned())
        self._affinity.hold(instance.index)
        try:
            return instance.model.run(inputs, outputs)
        finally:
            self._give(instance)

    def scale(self, min_workers: int, max_workers: int | None = None) -> None:
        """Bring the pool to ``min_workers`` instances (TorchServe's scaling; its
        ``max_worker`` bounds nothing more here: instances are not started on demand)."""
        count = max(1, min_workers)
        self.target = count
        with self._changed:
            have = len(self._instances)
        if count > have:
            self._grow(count - have)
        elif count < have:
            self._shrink(have - count)

    def describe(self) -> list[dict[str, Any]]:
        """TorchServe's ``workers`` entries of describe: one per instance."""
        with self._changed:
            instances = list(self._instances)
        return [
            {
                "id": str(9000 + i.index),
                "startTime": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(i.started_at)),
                "status": "READY",
                "memoryUsage": 0,  # one process: its memory is the server's
                "pid": os.getpid(),
                "gpu": self.device != "cpu",
                "gpuUsage": "N/A",
            }
            for i in instances
        ]

    def close(self) -> None:
        with self._changed:
            instances, self._instances = self._instances, []
        for instance in instances:
            _close(instance.model)

    def _grow(self, count: int) -> None:
        # loaded outside the lock: a load takes seconds, runs go on meanwhile
        made = [self._make() for _ in range(count)]
        with self._changed:
            for model in made:
                self._instances.append(Instance(self._next, model))
                self._next += 1
            self._changed.notify_all()

    def _shrink(self, count: int) -> None:
        with self._changed:
            # idle ones first; a running one leaves when its execution ends
            ordered = sorted(self._instances, key=lambda i: i.busy)
            leaving = ordered[:count]
            self._instances = [i for i in self._instances if i not in leaving]
            self._changed.notify_all()  # a run waiting for a leaving instance takes another
        for instance in leaving:
            if instance.busy:
                instance.retired = True
            else:
                _close(instance.model)

    def _take(self, pinned: int | None) -> Instance:
        with self._changed:
            while True:
                if pinned is not None and all(i.index != pinned for i in self._instances):
                    pinned = None  # its instance was scaled away: the sequence moves on
                free = [i for i in self._instances if not i.busy and pinned in (None, i.index)]
                if free:
                    chosen = min(free, key=lambda i: i.executions)
                    chosen.busy = True
                    return chosen
                self._choosy += pinned is not None
                try:
                    self._changed.wait()
                finally:
                    self._choosy -= pinned is not None

    def _give(self, instance: Instance) -> None:
        with self._changed:
            instance.busy = False
            instance.executions += 1
            if self._choosy:
                self._changed.notify_all()
            else:
                self._changed.notify()
        if instance.retired:
            _close(instance.model)


def _close(model: LoadedModel) -> None:
    close = getattr(model, "close", None)
    if close is not None:
        with contextlib.suppress(Exception):  # one instance failing to close must not stop others
            close()
