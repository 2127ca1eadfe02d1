"""A worker's main (``python -m lambdaserve.workers.child``): load one version's model code
with its runtime (a handler, a Python model, a workflow's DAG, a Paddle pipeline), then
answer the serving process's requests until told to stop or killed.

Its log records go to stderr one JSON line each (marked, so the serving process re-logs them
under their own logger and level, tracebacks whole); anything else the code prints is passed
on as it is.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
from dataclasses import astuple
from pathlib import Path
from typing import Any

import orjson

from lambdaserve.config.runtime_names import HANDLER_RUNTIME, PYTHON_RUNTIME
from lambdaserve.workers import messages
from lambdaserve.workers.channel import RECORD_MARK, Channel
from lambdaserve.workers.messages import Op
from lambdaserve.workers.shared_area import Area, arrays_of


class _LineHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
            line = orjson.dumps({"level": record.levelno, "name": record.name, "text": text})
            sys.stderr.write(RECORD_MARK + line.decode() + "\n")
            sys.stderr.flush()
        except Exception:  # a log line must never take the worker down
            self.handleError(record)


class ResponseWriter:
    """The response area, written from one cursor per call: a decoupled model's responses
    and its BLS inputs never overwrite what the serving process has yet to read."""

    def __init__(self, area: Area) -> None:
        self.area = area
        self.end = 0
        self._lock = threading.Lock()

    def write(self, arrays: list[tuple[str, Any]]) -> list[Any]:
        with self._lock:
            descriptors, self.end = self.area.write_tensors(arrays, self.end)
            return descriptors

    def write_bytes(self, data: bytes) -> int:
        with self._lock:
            offset, self.end = self.area.write_bytes(data, self.end)
            return offset


class Worker:
    def __init__(self, channel: Channel, requests: Area, responses: Area) -> None:
        self.channel, self.requests, self.responses = channel, requests, responses
        self.writer = ResponseWriter(responses)
        # one exchange on the channel at a time: a relayed call (BLS, a workflow's model
        # node) still waiting for its answer after its request was answered (a node past its
        # timeout-ms) must get that answer, not the next request
        self.exchange = threading.Lock()
        self.model: Any = None
        self.recorded: list[dict[str, Any]] = []
        self._relay_metrics()

    def _relay_metrics(self) -> None:
        """The code's custom metrics (TorchServe's ``context.metrics``, pb_utils'
        MetricFamily) go back with the answer, recorded in the serving process's /metrics."""
        from lambdaserve.metrics.custom import CUSTOM_METRICS

        def record(name: str, **fields: Any) -> None:
            self.recorded.append({"name": name} | {k: v for k, v in fields.items()})

        CUSTOM_METRICS.send_elsewhere(record)

    def load(self, spec: messages.Load) -> messages.Message:
        from lambdaserve.config.model_config import build
        from lambdaserve.runtimes.base import LoadOptions
        from lambdaserve.runtimes.registry import runtime_named
        from lambdaserve.tensors.signature import Signature

        config = build(spec.config, spec.model)
        options = LoadOptions(device="cpu", python_models=True, version=spec.version)
        if spec.backend in (PYTHON_RUNTIME, HANDLER_RUNTIME):  # BLS, a workflow's nodes
            from lambdaserve.runtimes import model_calls
            from lambdaserve.workers.call_relay import WorkerCalls

            model_calls.install(
                WorkerCalls(self.channel, self.requests, self.writer, self.exchange)
            )
        runtime = runtime_named(spec.backend)
        self.model = runtime.load(
            Path(spec.model_path), config, Signature.from_json(spec.signature), options
        )
        batching = getattr(self.model, "batching", None)
        return messages.loaded(astuple(batching) if batching else None)

    def run(self, message: messages.Message) -> messages.Message:
        from lambdaserve.runtimes.code_errors import request_ids
        from lambdaserve.runtimes.request_parameters import request_parameters
        from lambdaserve.runtimes.sequence_requests import in_sequences

        call = messages.Run.of(message)
        requests = [(self.requests.read_tensors(inputs), names) for inputs, names in call.requests]
        with (
            request_ids(call.ids),
            in_sequences(call.sequences),
            request_parameters(call.parameters),
        ):
            answers = self.model.run_requests(requests)
        results: list[dict[str, Any]] = []
        for answer in answers:
            if isinstance(answer, BaseException):
                results.append(messages.failed(answer))
                continue
            results.append(messages.produced(self.writer.write(arrays_of(answer))))
        return messages.results(results)

    def stream(self, message: messages.Message) -> messages.Message:
        """A decoupled model's responses, each sent as the model sends it; then the end."""
        from lambdaserve.runtimes.code_errors import request_ids

        call = messages.Stream.of(message)
        inputs = self.requests.read_tensors(call.inputs)
        with request_ids(call.ids):
            for arrays in self.model.stream(inputs, call.outputs):
                self.channel.send(messages.response(self.writer.write(arrays_of(arrays))))
        return messages.done()

    def rows(self, message: messages.Message) -> messages.Message:
        from lambdaserve.runtimes.code_errors import request_ids

        call = messages.Rows.of(message)
        rows = [
            {key: messages.field_value(value, self.requests.read_bytes) for key, value in row}
            for row in call.rows
        ]
        rows = [
            {k: bytearray(v) if isinstance(v, bytes) else v for k, v in r.items()} for r in rows
        ]
        with request_ids(call.ids):
            answers = self.model.handle_rows(rows, list(call.headers))
        out, end = [], self.writer.end
        for answer in answers:
            offset, end = self.responses.write_bytes(answer.body, end)
            out.append([offset, len(answer.body), answer.content_type, answer.status])
        return messages.answers(out)

    def serve(self) -> None:
        while True:
            with self.exchange:
                message = self.channel.receive()
            op = message[messages.OP]
            if op == Op.STOP:
                close = getattr(self.model, "close", None)
                if close is not None:
                    close()
                return
            self.writer.end = 0
            calls = {Op.RUN: self.run, Op.ROWS: self.rows, Op.STREAM: self.stream}
            try:
                reply = calls[op](message)
            except Exception as exc:
                reply = messages.failed(exc)
            if self.recorded:
                reply[messages.METRICS], self.recorded = self.recorded, []
            retire = getattr(self.model, "overrun", "")
            if retire:  # code still running that only the end of this process stops
                reply[messages.RETIRE] = retire
            self.channel.send(reply)


def main() -> None:
    # Ctrl-C, and a SIGTERM sent to the whole process group (a shell's job control, an init
    # system's group stop), reach workers too: the serving process drains what is in flight
    # and then stops its workers itself (its channel closes; a killed parent closes it too)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    handler = _LineHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    sock_fd, requests_fd, responses_fd = (
        int(fd) for fd in os.environ.pop("LAMBDASERVE_WORKER_FDS").split(",")
    )
    channel = Channel(socket.socket(fileno=sock_fd))
    spec = channel.receive()
    worker = Worker(channel, Area(requests_fd), Area(responses_fd))
    try:
        answer = worker.load(messages.Load.of(spec))
    except Exception as exc:
        logging.getLogger(__name__).debug("load failed", exc_info=exc)
        channel.send(messages.failed(exc))
        return
    channel.send(answer)
    worker.serve()


if __name__ == "__main__":
    main()
