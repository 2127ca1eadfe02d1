"""A version's model code served by its worker processes: the runtime Protocol
(``run`` / ``run_requests``, and ``handle_rows`` for TorchServe handlers) over the version's
workforce (``workers.workforce``, the pool it has), so the model server, the batcher and
every door are unchanged.

Faults stay in their model: a child that dies fails the requests it held once, with how it
ended; one that holds a request past the timeout (TorchServe's ``responseTimeout``) is
killed; either way the workforce restarts it after a backoff, or reports the version broken.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NoReturn

import numpy as np

from lambdaserve.errors import LambdaServeError, ModelCodeCrashed, ModelCodeTimedOut
from lambdaserve.metrics.custom import CUSTOM_METRICS
from lambdaserve.runtimes.code_errors import known_request_ids
from lambdaserve.runtimes.request_parameters import known_request_parameters
from lambdaserve.runtimes.sequence_requests import current_sequences
from lambdaserve.runtimes.torchserve.context import Answer
from lambdaserve.runtimes.torchserve.manifest import FrontendBatching
from lambdaserve.runtimes.triton_python.decoupled import one_response
from lambdaserve.tensors.signature import Arrays
from lambdaserve.workers import messages
from lambdaserve.workers.call_relay import answer_call
from lambdaserve.workers.channel import ChannelClosed, error_from
from lambdaserve.workers.deadline import current_deadline, expired
from lambdaserve.workers.messages import ERROR, Message, Op
from lambdaserve.workers.process import WorkerProcess
from lambdaserve.workers.shared_area import arrays_of
from lambdaserve.workers.workforce import WorkerSpec, Workforce

__all__ = ["WorkerModel", "WorkerSpec"]
logger = logging.getLogger(__name__)
_CALLS = (Op.BLS, Op.NODE)  # a worker's calls to other models, mid-call


class WorkerModel:
    """A loaded version whose code runs in ``spec.min_workers`` child processes."""

    device = "cpu"

    def __init__(self, spec: WorkerSpec, on_broken: Callable[[str], None] | None = None) -> None:
        self.workforce = Workforce(spec, on_broken)  # a load failure raises here

    @property
    def spec(self) -> WorkerSpec:
        return self.workforce.spec

    @property
    def decoupled(self) -> bool:
        return self.spec.decoupled

    # -- the workforce, as the doors read and change it ------------------------------------
    @property
    def batching(self) -> FrontendBatching:
        return self.workforce.batching

    @property
    def broken(self) -> str:
        return self.workforce.broken

    @property
    def target(self) -> int:
        return self.workforce.target

    @property
    def worker_count(self) -> int:
        return self.workforce.worker_count

    def scale(self, min_workers: int, max_workers: int | None = None) -> None:
        self.workforce.scale(min_workers, max_workers)

    def describe(self) -> list[dict[str, Any]]:
        return self.workforce.describe()

    def memory_bytes(self) -> int:
        return self.workforce.memory_bytes()

    def close(self) -> None:
        self.workforce.close()

    # -- the runtime Protocol --------------------------------------------------------------
    def run(self, inputs: Mapping[str, np.ndarray[Any, Any]], outputs: Sequence[str]) -> Arrays:
        [answer] = self.run_requests([(inputs, outputs)])
        if isinstance(answer, LambdaServeError):
            raise answer
        return answer

    def run_requests(
        self, requests: Sequence[tuple[Mapping[str, np.ndarray[Any, Any]], Sequence[str]]]
    ) -> list[Arrays | LambdaServeError]:
        if self.decoupled:  # where one answer is expected (v2 infer, a queue)
            return [one_response(self.stream(inputs, names)) for inputs, names in requests]
        ids = known_request_ids()  # the worker makes fresh ones only if it logs a failure
        sequences = current_sequences(len(requests))
        parameters = known_request_parameters()

        def send(worker: WorkerProcess) -> Message:
            encoded, end = [], 0
            for inputs, names in requests:
                descriptors, end = worker.requests.write_tensors(arrays_of(inputs), end)
                encoded.append((descriptors, names))
            return messages.run(encoded, ids, sequences, parameters)

        try:
            worker, reply = self._call(send)
        except LambdaServeError as exc:
            return [exc] * len(requests)
        if ERROR in reply:  # the code raised: the worker serves on (unless it retires)
            self._done(worker, reply)
            return [error_from(reply[ERROR])] * len(requests)
        results: list[Arrays | LambdaServeError] = []
        for result in reply[messages.RESULTS]:
            if ERROR in result:
                results.append(error_from(result[ERROR]))
            else:
                results.append(worker.responses.read_tensors(result[messages.OUTPUTS]))
        self._done(worker, reply)
        return results

    def handle_rows(
        self, rows: list[dict[str, Any]], headers: list[Mapping[str, str]] | None = None
    ) -> list[Answer]:
        """TorchServe's call, as ``HandlerModel.handle_rows``: bodies cross in the area."""
        ids = known_request_ids()

        def send(worker: WorkerProcess) -> Message:
            end = 0

            def write(data: bytes) -> int:
                nonlocal end
                offset, end = worker.requests.write_bytes(data, end)
                return offset

            encoded = [[messages.field(k, v, write) for k, v in row.items()] for row in rows]
            heads = [dict(h) for h in headers or [{} for _ in rows]]
            return messages.rows(encoded, heads, ids)

        worker, reply = self._call(send)
        if ERROR in reply:  # the code raised: the worker serves on (unless it retires)
            self._done(worker, reply)
            raise error_from(reply[ERROR])
        answers = [
            Answer(worker.responses.read_bytes(offset, length), content_type, status)
            for offset, length, content_type, status in reply[messages.ANSWERS]
        ]
        self._done(worker, reply)
        return answers

    # -- one call through one worker -------------------------------------------------------
    def _call(self, build: Callable[[WorkerProcess], Message]) -> tuple[WorkerProcess, Message]:
        """The answer to one message; the worker stays taken until its release (its
        response area is read first). Crashes and timeouts raise, the worker replaced."""
        worker = self._send(build)
        try:
            return worker, self._next(worker)
        except LambdaServeError:
            raise  # a crash or a timeout: the worker is already replaced
        except BaseException:
            self.workforce.release(worker)
            raise

    def _send(self, build: Callable[[WorkerProcess], Message]) -> WorkerProcess:
        own = current_deadline()
        if own is not None and own.at <= time.monotonic():
            raise expired(self.spec.model, own, ran=False)  # no worker to kill for it
        worker = self.workforce.take()
        try:
            worker.channel.send(build(worker))
        except ChannelClosed:
            self._lost(worker)
        except BaseException:
            self.workforce.release(worker)
            raise
        return worker

    def _next(self, worker: WorkerProcess) -> Message:
        """The worker's next message for its caller (its calls to other models answered on
        the way)."""
        deadline = time.monotonic() + self.spec.timeout_s
        wait = self.spec.timeout_s  # the same each call: no socket timeout change
        own = current_deadline()
        if own is not None and own.at < deadline:  # the request's own timeout comes first
            deadline, wait = own.at, max(0.001, own.at - time.monotonic())
        else:
            own = None
        try:
            while True:
                reply = worker.channel.receive(wait)
                if reply.get(messages.OP) not in _CALLS:
                    _record_metrics(reply.pop(messages.METRICS, ()))
                    return reply
                answer_call(worker, reply)  # a call to another model: answered, then wait on
                wait = max(0.001, deadline - time.monotonic())
        except TimeoutError:
            if own is not None:
                # the client's own deadline says nothing of the model's health: the worker
                # is replaced without counting a crash (clients cannot break a version)
                logger.warning(
                    "%s held a request past the request's own timeout: killing worker pid %s",
                    *(worker.label, worker.pid),
                )
                self.workforce.discard(worker)
                raise expired(self.spec.model, own, ran=True) from None
            logger.error(
                "%s held a request past its timeout of %.0f s: killing worker pid %s",
                worker.label,
                self.spec.timeout_s,
                worker.pid,
            )
            worker.kill()
            self.workforce.restart(worker, "timeout")
            raise ModelCodeTimedOut(
                f"the model's code did not answer within its timeout of {self.spec.timeout_s:g} s "
                f"(responseTimeout); its worker was killed and is restarted"
            ) from None
        except ChannelClosed:
            self._lost(worker)

    def _done(self, worker: WorkerProcess, reply: Message) -> None:
        """The call's answer is read: the worker serves on, or (it says its code left work
        running that cannot be stopped: a workflow's function node past its timeout-ms) it
        is killed and replaced, counted as a timeout kill is."""
        why = reply.get(messages.RETIRE)
        if not why:
            self.workforce.release(worker)
            return
        logger.error("%s: %s: killing worker pid %s", worker.label, why, worker.pid)
        worker.kill()
        self.workforce.restart(worker, str(why))

    def _lost(self, worker: WorkerProcess) -> NoReturn:
        ended = worker.how_it_ended()
        logger.error("%s: worker pid %s %s", worker.label, worker.pid, ended)
        self.workforce.restart(worker, ended)
        raise ModelCodeCrashed(f"the model's code crashed: its worker process {ended}") from None

    # -- a decoupled model's responses ----------------------------------------------------
    def stream(
        self, inputs: Mapping[str, np.ndarray[Any, Any]], outputs: Sequence[str]
    ) -> Iterator[Arrays]:
        """A decoupled model's responses to one request, each as the worker sends it; a
        caller that stops reading mid-stream has the worker replaced (it is still sending)."""
        ids = known_request_ids()

        def send(worker: WorkerProcess) -> Message:
            descriptors, _ = worker.requests.write_tensors(arrays_of(inputs))
            return messages.stream(descriptors, outputs, ids)

        worker = self._send(send)
        finished = False
        try:
            while True:
                reply = self._next(worker)
                if reply.get(messages.OP) == Op.RESPONSE:
                    yield worker.responses.read_tensors(reply[messages.OUTPUTS])
                    continue
                finished = True
                self.workforce.release(worker)
                if ERROR in reply:
                    raise error_from(reply[ERROR])
                return
        except LambdaServeError:
            finished = True  # the model's error, or a crash or timeout already replaced
            raise
        finally:
            if not finished:
                self.workforce.discard(worker)


def _record_metrics(recorded: Sequence[dict[str, Any]]) -> None:
    """The custom metrics the code recorded in its worker, recorded here (/metrics)."""
    for fields in recorded:
        try:
            CUSTOM_METRICS.record(**fields)
        except (TypeError, ValueError) as exc:  # as TorchServe: a bad metric is logged
            logger.error("[METRICS] %s", exc)
