"""The inference side's calls with no transport: what HTTP routes and gRPC services share.

As KServe's ``DataPlane`` sits under its REST and gRPC servers, every door asks the same
questions here (metadata, readiness, config, statistics, an inference) and gets the same
answers and the same domain errors; each door only encodes them. Inference goes through the
dynamic batchers when the plane has them, so requests from every door meet in their lanes:
the composition root (``wiring.process``) builds one plane per process and hands it to every
door, as KServe's ``model_server.py`` builds its one ``DataPlane`` for REST and gRPC.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from lambdaserve import __version__
from lambdaserve.catalog.items import VersionRecord
from lambdaserve.config.model_config import triton_data_type
from lambdaserve.config.runtime_names import OPENVINO_RUNTIME, PADDLE_INFERENCE_RUNTIME
from lambdaserve.errors import InferenceError, LambdaServeError, ModelNotReady
from lambdaserve.metrics.cold_starts import summary as cold_start_summary
from lambdaserve.protocol.names import check_model_name, parse_version
from lambdaserve.protocol.request_headers import answered_by, take_shadow
from lambdaserve.protocol.v2 import InferRequest
from lambdaserve.serving.model_server import ModelServer
from lambdaserve.serving.version_resolver import ServedVersion
from lambdaserve.tensors.shared_memory import SystemSharedMemory
from lambdaserve.tensors.signature import Signature, TensorSpec

if TYPE_CHECKING:  # the infer function's cold path imports this module: no batching, no handlers
    from lambdaserve.batching.dynamic_batcher import TensorBatcher
    from lambdaserve.runtimes.torchserve.context import Answer
    from lambdaserve.runtimes.torchserve.manifest import FrontendBatching
    from lambdaserve.serving.capture.data_capture import DataCapture
    from lambdaserve.serving.capture.shadow import ShadowSink
    from lambdaserve.serving.handler_sequences import HandlerSequences
    from lambdaserve.serving.raw_predictions import RawRequest
    from lambdaserve.serving.readiness import Readiness
    from lambdaserve.serving.response_cache.lookups import Lookup
    from lambdaserve.serving.server_batcher import RawBatcher
    from lambdaserve.tracing.request_trace import RequestTrace
    from lambdaserve.tracing.tracer import Tracer

T = TypeVar("T")
# Triton's extensions served on every door of every process (GET /v2 lists them, as Triton's
# clients read them); system_shared_memory and trace where the process has them
EXTENSIONS = [
    "classification",
    "sequence",
    "model_repository",
    "model_configuration",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "logging",
]


@dataclass(frozen=True)
class Inferred:
    """One request's outputs and the version that produced them (``served``: as resolved
    where it ran; None where the answer came without it)."""

    model: str
    version: int
    outputs: Mapping[str, np.ndarray[Any, Any]]
    served: ServedVersion | None = None


class InferenceDataPlane:
    """``server`` is looked up per call (tests and ``dev`` swap it); ``batcher`` is the
    long-running servers' dynamic batcher and ``raw_batcher`` its twin for TorchServe
    handlers' rows, both None where each request runs alone (Lambda). Built by the composition
    root (``wiring``), once per process: a plane per door would batch each door apart."""

    def __init__(
        self,
        server: Callable[[], ModelServer],
        batcher: TensorBatcher | None = None,
        readiness: Readiness | None = None,
        raw_batcher: RawBatcher | None = None,
        *,
        shared_memory: SystemSharedMemory | None = None,
        capture: DataCapture | None = None,
        tracer: Tracer | None = None,
        shadows: ShadowSink | None = None,
    ) -> None:
        self.server = server
        # where a weighted label's shadow copies go after the answer: run here (long-running
        # processes), or sent to the requests queue (Lambda, whose instance freezes once it
        # answers)
        self.shadows = shadows
        self.batcher = batcher
        # Triton's system shared memory: where clients on this host may share it (serve,
        # dev); None where none can (Lambda)
        self.shared_memory = shared_memory
        # payload capture, for the models whose config asks for it (data_capture)
        self.capture = capture
        # long-running servers: ready once their versions are warm, not while draining
        self.readiness = readiness
        # where tensors batch, so do handlers' raw requests (as their archives ask)
        self.raw_batcher = raw_batcher
        # Triton's trace extension (long-running servers); None in Lambda
        self.tracer = tracer
        # TorchServe's sequences of sequenceBatching handlers, as this process keeps them
        self._handler_sequences: HandlerSequences | None = None

    def server_metadata(self) -> dict[str, Any]:
        # "triton": the protocol's server name, which Triton's clients check; ours beside it
        return {
            "name": "triton",
            "version": __version__,
            # system_shared_memory where clients share this host's memory (serve, dev), "trace"
            # where this process traces, as Triton lists them
            "extensions": [
                *EXTENSIONS,
                *(["system_shared_memory"] if self.shared_memory is not None else []),
                *(["trace"] if self.tracer is not None else []),
            ],
            "implementation": f"lambdaserve {__version__}",
        }

    async def ready(self) -> bool:
        self.server()
        return self.readiness is None or self.readiness.ready

    def number_now(self, model: str, text: str | None) -> int | None:
        """A version as clients write it: empty or absent (the default), a number, a label
        (read from the catalog view: maybe I/O, so async callers use ``version_number``)."""
        if not text:
            return None
        if text.isdigit():
            return parse_version(text)
        return self.server().resolver.number(check_model_name(model), text)

    async def version_number(self, model: str, text: str | None) -> int | None:
        if not text or text.isdigit():
            return self.number_now(model, text)
        return await asyncio.to_thread(self.number_now, model, text)

    def resolve_now(self, model: str, number: int | None) -> ServedVersion:
        """The version a request for ``number`` (None: the default) runs on, in this thread
        (the catalog view is cached; a miss reads the catalog)."""
        return self.server().resolver.resolve(model, number)

    async def resolve_number(self, model: str, number: int | None) -> ServedVersion:
        return await asyncio.to_thread(self.resolve_now, model, number)

    async def versions(self, model: str) -> dict[int, VersionRecord]:
        """Every version of ``model`` the catalog holds, by number."""
        return await asyncio.to_thread(self.server().resolver.versions, model)

    async def model_names(self) -> list[str]:
        return await asyncio.to_thread(self.server().resolver.catalog.all_model_names)

    async def models_running(self, runtime: str, names: list[str]) -> list[str]:
        """Which of ``names`` have a version in ``runtime`` (sorted)."""
        catalog = self.server().resolver.catalog

        def running() -> list[str]:
            return sorted(
                str(name)
                for name in names
                if any(v.runtime == runtime for v in catalog.versions(name))
            )

        return await asyncio.to_thread(running)

    def forget(self, model: str) -> None:
        """Drop this process's view of ``model``: the next request reads the catalog (after a
        load, unload or config change made here)."""
        self.server().resolver.forget(model)

    async def resolve(self, model: str, version_text: str | None) -> ServedVersion:
        number = await self.version_number(model, version_text)
        return await asyncio.to_thread(
            self.server().resolver.resolve, check_model_name(model), number
        )

    async def served_for(self, inferred: Inferred) -> ServedVersion:
        """The version that produced ``inferred`` (resolved again only where unknown)."""
        if inferred.served is not None:
            return inferred.served
        return await self.served(inferred.model, inferred.version)

    async def served(self, model: str, number: int | None) -> ServedVersion:
        """The version a request runs on (inline when the resolver's view is fresh)."""
        server = self.server()
        found = server.served_now(model, number)
        if found is not None:
            return found
        return await asyncio.to_thread(server.resolver.resolve, model, number)

    async def model_metadata(self, model: str, version_text: str | None) -> dict[str, Any]:
        served = await self.resolve(model, version_text)
        ready = sorted(
            v for v, r in self.server().resolver.versions(model).items() if r.state == "READY"
        )
        return {
            "name": model,
            "versions": [str(v) for v in ready],
            "platform": served.platform,
            "inputs": [t.to_json() for t in client_inputs(served)],
            "outputs": [t.to_json() for t in client_outputs(served)],
        }

    async def model_ready(self, model: str, version_text: str | None) -> tuple[ServedVersion, bool]:
        """The version loaded (READY means it answers), and whether it was loaded before."""
        number = await self.version_number(model, version_text)
        server = self.server()

        def load() -> tuple[ServedVersion, bool]:
            served = server.resolver.resolve(check_model_name(model), number)
            was_loaded = (served.model, served.version) in server.residency.loaded_versions()
            server.load(served)
            return served, was_loaded

        return await asyncio.to_thread(load)

    async def model_config(self, model: str, version_text: str | None) -> dict[str, Any]:
        return autocompleted_config(await self.resolve(model, version_text))

    async def model_stats(
        self, model: str | None, version_text: str | None, *, cold_starts: bool = True
    ) -> dict[str, Any]:
        """Triton's statistics of this process; for one model, each version's cold starts
        too, wherever it loaded (``cold_start``: p50/p99 per phase from the catalog, as
        describe's ``coldStart``; gRPC's ModelStatistics has no field for them)."""
        if not model:
            return self.server().stats.snapshot()
        server = self.server()
        await asyncio.to_thread(server.resolver.versions, check_model_name(model))
        document = server.stats.snapshot(model, await self.version_number(model, version_text))
        for entry in document["model_stats"] if cold_starts else ():
            samples = await asyncio.to_thread(
                server.resolver.catalog.cold_starts, model, int(entry["version"])
            )
            entry["cold_start"] = cold_start_summary(samples)
        return document

    async def infer(self, model: str, version: int | None, request: InferRequest) -> Inferred:
        """One decoded request through the batcher when there is one, else alone. ``version``
        is the one the request asked for (None: the default), as every door passes it, so
        requests for the same version meet in one lane whichever door they came in by.
        Traced from here to its answer when the tracer samples it."""
        if request.parameters.get("sequence_start") is True:
            await self._check_accepting_sequences(model, version)
        trace = self.tracer.start(model, request) if self.tracer is not None else None
        if trace is None:
            inferred = await self.infer_traced(model, version, request, None)
            answered_by(inferred.version)  # its door says which version answered
            if self.shadows is not None:
                self.offer_shadow(model, request, inferred.version)
            return inferred
        answered = None
        try:
            answered = await self.infer_traced(model, version, request, trace)
            answered_by(answered.version)
            if self.shadows is not None:
                self.offer_shadow(model, request, answered.version)
            return answered
        finally:
            assert self.tracer is not None
            self.tracer.finish(trace, request, answered.version if answered else None)

    def offer_shadow(self, model: str, request: InferRequest, answered: int) -> None:
        """A copy of the answered request to its label's shadow version, where the label drew
        one (``infer``, and the infer function's v2 path, which runs the model itself)."""
        if self.shadows is None:
            return
        shadow = take_shadow(model)
        if shadow is not None:
            self.shadows.offer(model, shadow, request, answered)

    async def infer_traced(
        self, model: str, version: int | None, request: InferRequest, trace: RequestTrace | None
    ) -> Inferred:
        """``infer`` for a request whose trace (if any) is already started: a client's, or
        model code's own (a child of its caller's trace)."""
        if trace is not None:
            assert self.tracer is not None
            self.tracer.queued(trace, request)
        if self.batcher is not None:
            server = self.server()
            # the response cache answers before the batcher: a hit never queues
            served, lookup = (
                await self._cache_lookup(server, model, version, request)
                if server.response_cache is not None
                else (None, None)
            )
            if served is not None and lookup is not None and lookup.outputs is not None:
                return Inferred(model, served.version, lookup.outputs, served)
            outcome = await self.batcher.submit(model, version, request)
            if outcome.error is not None:
                raise outcome.error
            if outcome.outputs is None or outcome.version is None:
                raise InferenceError("the batch returned no outputs for this request")
            if served is not None and lookup is not None and outcome.version == served.version:
                await self._cache_work(partial(server.cache_store, served, lookup, outcome.outputs))
            return Inferred(model, outcome.version, outcome.outputs, outcome.served)
        server = self.server()
        return await self.call(
            model,
            version,
            lambda: server.infer(
                model, version, request, lambda s, outputs: Inferred(model, s.version, outputs, s)
            ),
            runs_model=True,
        )

    async def infer_named(
        self,
        served: ServedVersion,
        request: InferRequest,
        run: Callable[[], Mapping[str, np.ndarray[Any, Any]]],
    ) -> Mapping[str, np.ndarray[Any, Any]]:
        """``run`` of ``request`` (a TF signature by name: ``signatures.run_signature``,
        which asks the response cache) alone in a thread, traced as ``infer`` traces."""
        answered_by(served.version)
        trace = self.tracer.start(served.model, request) if self.tracer is not None else None
        if trace is None:
            return await self.call(served.model, served.version, run, runs_model=True)
        assert self.tracer is not None
        answered = None
        try:
            self.tracer.queued(trace, request)
            answered = await self.call(served.model, served.version, run, runs_model=True)
            return answered
        finally:
            self.tracer.finish(trace, request, served.version if answered is not None else None)

    async def _check_accepting_sequences(self, model: str, version: int | None) -> None:
        """While this server drains, sequences in flight go on and new ones are refused
        (Triton's sequence batcher, word for word), so they start on a task that stays."""
        if self.readiness is None or not self.readiness.draining:
            return
        if (await self.served(model, version)).config.sequence_batching is not None:
            raise ModelNotReady(
                "Server is stopping, scheduler for model has stopped accepting new "
                "inference requests"
            )

    async def _cache_lookup(
        self, server: ModelServer, model: str, version: int | None, request: InferRequest
    ) -> tuple[ServedVersion, Lookup | None]:
        """``server``'s response cache (it has one) asked for ``request``: the version, and
        the lookup where that version caches."""
        served = await self.served(model, version)
        if not served.config.response_cache:
            return served, None
        return served, await self._cache_work(partial(server.cache_lookup, served, request))

    async def _cache_work(self, work: Callable[[], T]) -> T:
        """In-process tiers answer inline; one that waits on the network runs in a thread."""
        cache = self.server().response_cache
        if cache is not None and cache.blocking:
            return await asyncio.to_thread(work)
        return work()

    async def stream(
        self, model: str, version: int | None, request: InferRequest
    ) -> AsyncIterator[Inferred]:
        """Every response to one request (a decoupled model's many; another's one), each as
        the model sends it: the model runs in a thread, the loop only waits. Another model's
        one answer goes through ``infer`` (its batcher, queue policy, trace), as every door's."""
        from lambdaserve.serving import streaming

        if not await self.decoupled(model, version):
            yield await self.infer(model, version, request)
            return

        served, responses = await asyncio.to_thread(
            streaming.stream, self.server(), model, version, request
        )
        while True:
            outputs = await asyncio.to_thread(next, responses, None)
            if outputs is None:
                return
            yield Inferred(model, served.version, outputs, served)

    async def decoupled(self, model: str, version: int | None) -> bool:
        from lambdaserve.serving import streaming

        server = self.server()
        return await self.call(
            model, version, lambda: streaming.is_decoupled(server, model, version)
        )

    async def predict_raw(self, served: ServedVersion, raw: RawRequest) -> Answer:
        """A raw request (a handler's, or BYTES elements): batched with others for the same
        handler version where its archive sets batchSize and this server batches; else alone."""
        from lambdaserve.serving.raw_predictions import handler_batching, handler_step

        server = self.server()
        answered_by(served.version)
        asks = await self.call(
            served.model, served.version, lambda: handler_batching(server, served)
        )
        step = handler_step(served, raw, asks)
        if step is None:
            return await self._predict_raw(served, raw, asks)
        # a sequenceBatching handler's request: after its sequence's earlier ones
        if self._handler_sequences is None:
            from lambdaserve.serving.handler_sequences import HandlerSequences

            self._handler_sequences = HandlerSequences()
        async with self._handler_sequences.step(*step):
            return await self._predict_raw(served, raw, asks)

    async def _predict_raw(
        self, served: ServedVersion, raw: RawRequest, asks: FrontendBatching
    ) -> Answer:
        from lambdaserve.serving.raw_predictions import predict_raw

        server = self.server()
        model, version = served.model, served.version
        if self.raw_batcher is not None and asks.batch_size > 1:
            outcome = await self.raw_batcher.submit(model, version, raw)
            if isinstance(outcome, LambdaServeError):
                raise outcome
            return outcome
        return await self.call(
            model, version, lambda: predict_raw(server, model, version, raw), runs_model=True
        )

    async def call(
        self, model: str, version: int | None, work: Callable[[], T], runs_model: bool = False
    ) -> T:
        """``work`` inline when it needs no I/O: a thread hop costs more than a small model's
        run. Work that ``runs_model`` waits on worker processes from a thread, never on the
        event loop (``ModelServer.answers_inline``)."""
        server = self.server()
        if (
            server.answers_inline(model, version)
            if runs_model
            else server.is_loaded(model, version)
        ):
            return work()
        return await asyncio.to_thread(work)


def autocompleted_config(served: ServedVersion) -> dict[str, Any]:
    """Triton's config JSON, with inputs/outputs filled from the model as Triton does."""
    document = served.config.to_triton_json()
    runtime = served.record.runtime
    if runtime in (OPENVINO_RUNTIME, PADDLE_INFERENCE_RUNTIME) and served.platform in (
        "openvino",
        "paddle",
    ):
        document["backend"] = served.platform  # Triton's backends without a platform name
    else:
        document["platform"] = served.platform
    batched = served.config.max_batch_size > 0
    for key, specs in (("input", client_inputs(served)), ("output", client_outputs(served))):
        if not document[key]:
            document[key] = [_triton_tensor(spec, batched) for spec in specs]
    formats = dict(served.config.input_formats)
    for tensor in document["input"]:  # Triton always writes it; image clients read it
        tensor["format"] = formats.get(tensor["name"], "FORMAT_NONE")
    return document


def client_signature(served: ServedVersion) -> Signature:
    """The signature a client's request is checked against (``client_inputs``)."""
    if served.config.sequence_batching is None:
        return served.signature
    return replace(served.signature, inputs=client_inputs(served))


def client_inputs(served: ServedVersion) -> tuple[TensorSpec, ...]:
    """The inputs a client sends: a sequence model's control and state inputs are the
    server's to fill, and Triton's metadata does not list them."""
    sequences = served.config.sequence_batching
    if sequences is None:
        return served.signature.inputs
    return tuple(t for t in served.signature.inputs if t.name not in sequences.tensors)


def client_outputs(served: ServedVersion) -> tuple[TensorSpec, ...]:
    """The outputs a client gets: a state output only where the config lists it."""
    sequences = served.config.sequence_batching
    if sequences is None:
        return served.signature.outputs
    declared = {t.name for t in served.config.outputs}
    hidden = {s.output_name for s in sequences.states} - declared
    return tuple(t for t in served.signature.outputs if t.name not in hidden)


def _triton_tensor(spec: TensorSpec, batched: bool) -> dict[str, Any]:
    dims = list(spec.shape[1:] if batched else spec.shape)
    return {"name": spec.name, "data_type": triton_data_type(spec.datatype), "dims": dims}
