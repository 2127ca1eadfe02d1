"""Runs a Paddle pipeline as Paddle Serving's DAG executor does: the request unpacked by the
entry op, each Op's ``preprocess`` → ``process`` (its local model) → ``postprocess`` in
dependency order with its inputs keyed by the producing ops' names, errors carried to the
exit op with Paddle's error numbers, and each Op's config.yml settings applied:

- ``concurrency``: at most that many requests inside the Op at once;
- ``timeout`` (ms) and ``retry`` (total tries, as Paddle counts them) around ``process``;
- ``batch_size`` and ``auto_batching_timeout`` (ms): requests arriving together share one
  ``process`` call, their feeds concatenated along axis 0 and the fetches split back.

Differences, on purpose: ``retry`` in config.yml is applied (Paddle reads it only from the
constructor); a ``batch_size`` without ``auto_batching_timeout`` takes what is waiting rather
than blocking until the batch is full.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lambdaserve.runtimes.op_threads import ReusedThreads
from lambdaserve.runtimes.paddle_serving.batching import Gatherer, merged_feeds, sliced
from lambdaserve.runtimes.paddle_serving.ops import (
    CustomException,
    CustomExceptionCode,
    Op,
    PipelineRequest,
    PipelineResponse,
    PreparedPipeline,
    RequestOp,
)

Code = CustomExceptionCode


@dataclass(frozen=True)
class OpSettings:
    """One Op's settings: the constructor's where given, else its config.yml section."""

    concurrency: int = 1
    timeout_s: float | None = None
    tries: int = 1
    batch_size: int = 1
    batch_wait_s: float | None = None
    model_config: str | None = None
    fetch_list: tuple[str, ...] | None = None


def op_settings(op: Op, section: dict[str, Any]) -> OpSettings:
    def chosen(key: str, default: Any) -> Any:
        given = op.given.get(key)
        return given if given is not None else section.get(key, default)

    local = section.get("local_service_conf") or {}
    timeout_ms = float(chosen("timeout", -1))
    batch_size = max(1, int(chosen("batch_size", 1)))
    wait_ms = float(chosen("auto_batching_timeout", -1))
    fetch = op.given.get("fetch_list") or local.get("fetch_list")
    return OpSettings(
        concurrency=max(1, int(chosen("concurrency", 1))),
        timeout_s=timeout_ms / 1000 if timeout_ms > 0 else None,
        tries=max(1, int(chosen("retry", 1))),
        batch_size=batch_size,
        batch_wait_s=wait_ms / 1000 if wait_ms > 0 and batch_size > 1 else None,
        model_config=local.get("model_config"),
        fetch_list=tuple(fetch) if fetch else None,
    )


@dataclass(frozen=True)
class Failed:
    """An error travelling to the exit op, as Paddle's error ChannelData does."""

    code: int
    message: str


def dag_order(prepared: PreparedPipeline) -> tuple[RequestOp, list[Op]]:
    """The entry op and every Op between it and the exit, producers before consumers."""
    seen: dict[str, Op] = {}
    stack = list(prepared.response_op.get_input_ops())
    while stack:
        op = stack.pop()
        if op.name in seen:
            if seen[op.name] is not op:
                raise ValueError(f"two ops are named {op.name!r}: op names must be unique")
            continue
        seen[op.name] = op
        stack.extend(op.get_input_ops())
    entries = [op for op in seen.values() if not op.get_input_ops()]
    if len(entries) != 1 or not isinstance(entries[0], RequestOp):
        raise ValueError(
            "the DAG must start at exactly one RequestOp (get_pipeline_response's read_op); "
            f"ops without inputs: {[op.name for op in entries]}"
        )
    order: list[Op] = []
    done = {entries[0].name}
    pending = [op for op in seen.values() if op is not entries[0]]
    while pending:
        ready = [op for op in pending if all(i.name in done for i in op.get_input_ops())]
        if not ready:
            raise ValueError(f"the ops {[op.name for op in pending]} form a cycle")
        for op in ready:
            order.append(op)
            done.add(op.name)
        pending = [op for op in pending if op.name not in done]
    return entries[0], order


class OpRunner:
    """One Op with its settings applied."""

    def __init__(self, op: Op, settings: OpSettings) -> None:
        self.op = op
        self.settings = settings
        self._slots = threading.BoundedSemaphore(settings.concurrency)
        self._batcher = (
            Gatherer(self._process_batch, settings.batch_size, settings.batch_wait_s)
            if settings.batch_size > 1
            else None
        )
        # Tries that overran their timeout keep running (Python cannot stop a thread): at
        # most as many as the Op's requests could leave, then a timeout answers at once.
        self._threads = ReusedThreads(cap=settings.concurrency * settings.tries)

    def run(self, inputs: dict[str, Any], data_id: int, log_id: int) -> Any:
        """The Op's output dict for one request, or Failed. A request holds one of the
        Op's slots throughout; with batching, only around pre- and postprocess (process runs
        in the shared batch, which the slots would otherwise cap at ``concurrency``)."""
        batching = self._batcher is not None
        whole = contextlib.nullcontext() if batching else self._slots
        stage = self._slots if batching else contextlib.nullcontext()
        with whole:
            with stage:
                prepared = self._preprocess(inputs, data_id, log_id)
            if isinstance(prepared, Failed):
                return prepared
            data, skip = prepared
            fetched = data if skip or self.op.client is None else self._process(data, log_id)
            if isinstance(fetched, Failed):
                return fetched
            with stage:
                return self._postprocess(inputs, fetched, data_id, log_id)

    def close(self) -> None:
        self._threads.close()

    def _preprocess(self, inputs: dict[str, Any], data_id: int, log_id: int) -> Any:
        try:
            data, skip, code, info = self.op.preprocess(inputs, data_id, log_id)
        except Exception as exc:
            return _raised(exc, self.op, "preprocess", log_id)
        if code is not None:
            return Failed(int(code), str(info))
        if not isinstance(data, dict | list):
            return Failed(
                Code.TYPE_ERROR.value,
                f"[{self.op.name}] preprocess must return a dict or a list of dicts as its "
                f"first value, not {type(data).__name__}",
            )
        return data, bool(skip)

    def _postprocess(self, inputs: dict[str, Any], fetched: Any, data_id: int, log_id: int) -> Any:
        try:
            output, code, info = self.op.postprocess(inputs, fetched, data_id, log_id)
        except Exception as exc:
            return _raised(exc, self.op, "postprocess", log_id)
        if code is not None:
            return Failed(int(code), str(info))
        if not isinstance(output, dict):
            return Failed(Code.TYPE_ERROR.value, "postprocess should return dict")
        return output

    def _process(self, data: dict[str, Any] | list[dict[str, Any]], log_id: int) -> Any:
        if isinstance(data, list):  # several feeds of one request: one call each
            results = [self._process_batch([feed], log_id) for feed in data]
            failed = next((r for r in results if isinstance(r, Failed)), None)
            return failed or [r[0] for r in results]
        if self._batcher is not None:
            return self._batcher.submit(data, log_id)
        result = self._process_batch([data], log_id)
        return result if isinstance(result, Failed) else result[0]

    def _process_batch(self, feeds: list[dict[str, Any]], log_id: int) -> Any:
        """Each feed's fetch dict (one process call for all of them), or Failed."""
        try:
            return self._tries(feeds, log_id)
        except Exception as exc:  # feeds that do not concatenate, a process that returns junk
            return self._failed(Code.UNKNOW.value, f"{type(exc).__name__}: {exc}")

    def _tries(self, feeds: list[dict[str, Any]], log_id: int) -> Any:
        merged, bounds = merged_feeds(feeds)
        timeout = self.settings.timeout_s
        for attempt in range(self.settings.tries):
            if timeout is None:
                try:
                    result = self.op.process([merged], log_id)
                except Exception as exc:
                    return self._failed(Code.UNKNOW.value, f"{type(exc).__name__}: {exc}")
            else:
                try:
                    result = self._threads.run(timeout, self.op.process, ([merged], log_id))
                except TimeoutError:
                    if attempt + 1 < self.settings.tries:
                        continue
                    return self._failed(
                        Code.TIMEOUT.value,
                        f"(log_id={log_id}) {self.op.name} Failed to process(batch: "
                        f"{len(feeds)}): exceeded retry count.",
                    )
                except Exception as exc:
                    return self._failed(Code.UNKNOW.value, f"{type(exc).__name__}: {exc}")
            fetched, code, info = result
            if code not in (None, Code.OK.value) or fetched is None:
                return self._failed(int(code or Code.UNKNOW.value), str(info))
            return [sliced(fetched, start, end, len(feeds)) for start, end in bounds]
        raise AssertionError("unreachable: tries >= 1")

    def _failed(self, code: int, info: str) -> Failed:
        return Failed(
            code,
            f"[{self.op.name}] failed to predict. {info}. Please check the input dict and "
            "the op's logs for more details.",
        )


def _raised(exc: Exception, op: Op, stage: str, log_id: int) -> Failed:
    if isinstance(exc, CustomException):
        return Failed(int(exc.error_code), exc.error_msg)
    message = str(exc).replace("'", "").replace('"', "")
    return Failed(
        Code.UNKNOW.value,
        f"Log_id: {log_id}  Raise_msg: {message}  ClassName: {type(op).__name__}  "
        f"FunctionName: {stage}",
    )


class PipelineExecutor:
    """A prepared pipeline, served: one request in, Paddle's response out."""

    def __init__(
        self, prepared: PreparedPipeline, predictor_for: Callable[[str, OpSettings], Any]
    ) -> None:
        self.name = prepared.name
        self._entry, ops = dag_order(prepared)
        self._exit = prepared.response_op
        sections = prepared.config.get("op") or {}
        self.runners: list[OpRunner] = []
        for op in ops:
            settings = op_settings(op, sections.get(op.name) or {})
            if settings.model_config:
                op.client = predictor_for(op.name, settings)
                op._fetch_names = list(settings.fetch_list) if settings.fetch_list else None
            op.init_op()
            self.runners.append(OpRunner(op, settings))
        self._ids = iter(range(1 << 62))
        self._ids_lock = threading.Lock()

    def close(self) -> None:
        """The Ops' idle timed-call threads end; busy ones end with their calls."""
        for runner in self.runners:
            runner.close()

    def call(self, request: PipelineRequest) -> PipelineResponse:
        with self._ids_lock:
            data_id = next(self._ids)
        try:
            data, log_id, code, info = self._entry.unpack_request_package(request)
        except Exception as exc:
            return PipelineResponse(Code.RPC_PACKAGE_ERROR.value, f"rpc package error: {exc}")
        if code is not None:
            return PipelineResponse(int(code), str(info))
        try:
            return self._run(data, data_id, log_id)
        except Exception as exc:  # an Op's output that breaks the DAG's plumbing
            return PipelineResponse(Code.UNKNOW.value, f"{type(exc).__name__}: {exc}")

    def _run(self, data: Any, data_id: int, log_id: int) -> PipelineResponse:
        outputs: dict[str, Any] = {self._entry.name: data}
        for runner in self.runners:
            inputs = {i.name: outputs[i.name] for i in runner.op.get_input_ops()}
            failed = next((v for v in inputs.values() if isinstance(v, Failed)), None)
            outputs[runner.op.name] = failed or runner.run(inputs, data_id, log_id)
        [last] = self._exit.get_input_ops()
        result = outputs[last.name]
        if isinstance(result, Failed):
            return PipelineResponse(result.code, result.message)
        try:
            return self._exit.pack_response_package({last.name: result})
        except Exception as exc:
            return PipelineResponse(Code.RPC_PACKAGE_ERROR.value, f"rpc package error: {exc}")


def model_folder(base_dir: Path, model_config: str) -> Path:
    """An Op's ``model_config`` folder inside the version directory."""
    folder = (base_dir / model_config).resolve()
    if not folder.is_relative_to(base_dir.resolve()):
        raise ValueError(f"model_config {model_config!r} is outside the version directory")
    return folder
