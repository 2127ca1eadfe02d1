"""KServe v2 / Triton's ``inference.GRPCInferenceService`` over the inference data plane.

Every RPC of Triton's service answers: health, metadata, config and statistics as the HTTP
routes answer them; ModelInfer and ModelStreamInfer through the dynamic batcher (one response
per request for non-decoupled models, errors in-band on the stream as Triton sends them); the
repository RPCs where management is enabled; shared memory, trace and log settings as the
HTTP extensions answer them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Any

from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from lambdaserve.apps.grpc.calls import Context, error_text, unary
from lambdaserve.apps.management import load_model
from lambdaserve.apps.trace_settings import trace_setting_answer
from lambdaserve.apps.triton_extras import (
    log_level,
    log_settings,
    shared_memory_refusal,
    unknown_region,
)
from lambdaserve.errors import InvalidInput
from lambdaserve.protocol.grpc import kserve
from lambdaserve.protocol.names import check_model_name
from lambdaserve.protocol.request_headers import forget, receive
from lambdaserve.publishing.management import ModelManager
from lambdaserve.serving.capture.capture_offers import (
    GRPC,
    GRPC_FRAMED,
    framed,
    offer,
    offer_messages,
)
from lambdaserve.serving.data_plane import InferenceDataPlane
from lambdaserve.tracing.frontend import FRONTEND
from lambdaserve.tracing.otel import CALLER

# Requests of one stream in flight at once: enough to fill a batch, bounded against a flood.
STREAM_WINDOW = 64


class KServeServicer(service_pb2_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]
    def __init__(
        self,
        plane: InferenceDataPlane,
        manager: Callable[[], ModelManager] | None = None,
    ) -> None:
        self._plane = plane
        self._manager = manager

    @unary
    async def ServerLive(self, request: pb.ServerLiveRequest, context: Context) -> Any:
        return pb.ServerLiveResponse(live=True)

    @unary
    async def ServerReady(self, request: pb.ServerReadyRequest, context: Context) -> Any:
        return pb.ServerReadyResponse(ready=await self._plane.ready())

    @unary
    async def ServerMetadata(self, request: pb.ServerMetadataRequest, context: Context) -> Any:
        document = self._plane.server_metadata()
        return pb.ServerMetadataResponse(
            name=document["name"], version=document["version"], extensions=document["extensions"]
        )

    @unary
    async def ModelReady(self, request: pb.ModelReadyRequest, context: Context) -> Any:
        # READY means it answers: the probe loads the version; a failure is "not ready"
        try:
            await self._plane.model_ready(request.name, request.version)
        except Exception:
            return pb.ModelReadyResponse(ready=False)
        return pb.ModelReadyResponse(ready=True)

    @unary
    async def ModelMetadata(self, request: pb.ModelMetadataRequest, context: Context) -> Any:
        return kserve.model_metadata(
            await self._plane.model_metadata(request.name, request.version)
        )

    @unary
    async def ModelConfig(self, request: pb.ModelConfigRequest, context: Context) -> Any:
        return kserve.model_config(await self._plane.model_config(request.name, request.version))

    @unary
    async def ModelStatistics(self, request: pb.ModelStatisticsRequest, context: Context) -> Any:
        return kserve.model_statistics(
            await self._plane.model_stats(request.name, request.version, cold_starts=False)
        )

    @unary
    async def ModelInfer(self, request: pb.ModelInferRequest, context: Context) -> Any:
        tracer = self._plane.tracer
        door = tracer.opened("GRPC") if tracer is not None else None
        if door is None:
            return await self._infer(request)
        assert tracer is not None
        # grpc.aio hands the request read and sends the answer after this returns: the
        # stamps are this handler's entry and its end
        door_token = door.read()
        caller = None
        if tracer.exporter is not None:  # OpenTelemetry mode: the caller's trace context
            metadata = dict(context.invocation_metadata() or ())
            caller = CALLER.set(metadata.get("traceparent"))
        try:
            return await self._infer(request)
        finally:
            if caller is not None:
                CALLER.reset(caller)
            FRONTEND.reset(door_token)
            tracer.sent(door, time.perf_counter_ns())

    async def ModelStreamInfer(
        self, requests: AsyncIterator[pb.ModelInferRequest], context: Context
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """Each request answered as it completes (requests of a stream batch together);
        a failed request is an in-band error, and the stream goes on."""
        answers: asyncio.Queue[pb.ModelStreamInferResponse | None] = asyncio.Queue()
        window = asyncio.Semaphore(STREAM_WINDOW)
        running: set[asyncio.Task[None]] = set()

        # a sequence's steps run in the order the stream sent them, one after another
        last_step: dict[tuple[str, Any], asyncio.Task[None]] = {}

        async def answer(request: pb.ModelInferRequest, after: asyncio.Task[None] | None) -> None:
            # each request of the stream is received with the call's metadata (a weighted
            # label's sticky key), in its own task's context: its own shadow draw
            token = receive(context)
            try:
                if after is not None:
                    await asyncio.wait([after])
                async for response in self._stream(request):
                    await answers.put(pb.ModelStreamInferResponse(infer_response=response))
            except Exception as exc:
                await answers.put(pb.ModelStreamInferResponse(error_message=error_text(exc)))
            finally:
                forget(token)
                window.release()

        async def read() -> None:
            try:
                async for request in requests:
                    await window.acquire()
                    sequence = kserve.sequence_of(request)
                    after = last_step.get(sequence) if sequence is not None else None
                    task = asyncio.create_task(answer(request, after))
                    if sequence is not None:
                        last_step[sequence] = task
                        task.add_done_callback(partial(_forget_step, last_step, sequence))
                    running.add(task)
                    task.add_done_callback(running.discard)
                if running:
                    await asyncio.gather(*running)
            finally:
                await answers.put(None)

        reader = asyncio.create_task(read())
        try:
            while (response := await answers.get()) is not None:
                yield response
        finally:
            reader.cancel()
            for task in list(running):
                task.cancel()

    async def _stream(self, request: pb.ModelInferRequest) -> AsyncIterator[pb.ModelInferResponse]:
        """A stream's answers to one request: a decoupled model's every response, then (when
        the client asked, as tritonclient's enable_empty_final_response does) an empty one
        flagged final; any other model's one response, flagged final when asked."""
        model = check_model_name(request.model_name)
        number = await self._plane.version_number(model, request.model_version)
        flagged = request.parameters["triton_enable_empty_final_response"].bool_param
        if not await self._plane.decoupled(model, number):
            response = await self._infer(request)
            if flagged:
                response.parameters["triton_final_response"].bool_param = True
            yield response
            return
        decoded = kserve.infer_request(request)
        version = number
        kept: list[bytes] = []  # the responses, for payload capture once the model is done
        async for inferred in self._plane.stream(model, number, decoded):
            version = inferred.version
            response = kserve.infer_response(model, version, decoded.id, inferred.outputs)
            if flagged:
                response.parameters["triton_final_response"].bool_param = False
            if self._plane.capture is not None:
                kept.append(framed(response.SerializeToString()))
            yield response
        if self._plane.capture is not None and version is not None:
            await offer(
                self._plane,
                model,
                version,
                (request.SerializeToString, GRPC),
                (b"".join(kept), GRPC_FRAMED),
            )
        if flagged:
            final = pb.ModelInferResponse(
                model_name=model, model_version=str(version or ""), id=decoded.id or ""
            )
            final.parameters["triton_final_response"].bool_param = True
            yield final

    async def _infer(self, request: pb.ModelInferRequest) -> pb.ModelInferResponse:
        model = check_model_name(request.model_name)
        number = await self._plane.version_number(model, request.model_version)
        shared = self._plane.shared_memory
        decoded = kserve.infer_request(request, shared)
        inferred = await self._plane.infer(model, number, decoded)
        response = kserve.infer_response(
            model, inferred.version, decoded.id, inferred.outputs, decoded, shared=shared
        )
        if self._plane.capture is not None:  # no coroutine on the hot path when off
            await offer_messages(
                self._plane, model, inferred.version, request, response, served=inferred.served
            )
        return response

    @unary
    async def RepositoryIndex(self, request: pb.RepositoryIndexRequest, context: Context) -> Any:
        manager = self._management()
        entries = await asyncio.to_thread(manager.index, request.ready)
        response = pb.RepositoryIndexResponse()
        for entry in entries:
            response.models.add(
                name=entry.name, version=str(entry.version), state=entry.state, reason=entry.reason
            )
        return response

    @unary
    async def RepositoryModelLoad(
        self, request: pb.RepositoryModelLoadRequest, context: Context
    ) -> Any:
        manager = self._management()
        name = check_model_name(request.model_name)
        body = {"parameters": kserve.parameters(request.parameters)}
        await asyncio.to_thread(load_model, manager, name, body)
        self._plane.forget(name)
        return pb.RepositoryModelLoadResponse()

    @unary
    async def RepositoryModelUnload(
        self, request: pb.RepositoryModelUnloadRequest, context: Context
    ) -> Any:
        manager = self._management()
        name = check_model_name(request.model_name)
        await asyncio.to_thread(manager.unload, name)
        self._plane.forget(name)
        await asyncio.to_thread(self._plane.server().residency.unload, name)
        return pb.RepositoryModelUnloadResponse()

    def _management(self) -> ModelManager:
        if self._manager is None:
            raise InvalidInput(
                "model management over gRPC is off on this server: start `lambdaserve serve` "
                "with --grpc-management (its task role needs the manage function's "
                "permissions), or use the management API, IAM-authorised when deployed"
            )
        return self._manager()

    @unary
    async def SystemSharedMemoryStatus(
        self, request: pb.SystemSharedMemoryStatusRequest, context: Context
    ) -> Any:
        shared = self._plane.shared_memory
        if shared is None:
            if request.name:
                raise unknown_region("system", request.name)
            return pb.SystemSharedMemoryStatusResponse()
        answer = pb.SystemSharedMemoryStatusResponse()
        for region in shared.status(request.name):
            answer.regions[region.name].CopyFrom(
                pb.SystemSharedMemoryStatusResponse.RegionStatus(
                    name=region.name,
                    key=region.key,
                    offset=region.offset,
                    byte_size=region.byte_size,
                )
            )
        return answer

    @unary
    async def SystemSharedMemoryRegister(
        self, request: pb.SystemSharedMemoryRegisterRequest, context: Context
    ) -> Any:
        shared = self._plane.shared_memory
        if shared is None:
            raise shared_memory_refusal("system")
        await asyncio.to_thread(
            shared.register, request.name, request.key, request.offset, request.byte_size
        )
        return pb.SystemSharedMemoryRegisterResponse()

    @unary
    async def SystemSharedMemoryUnregister(
        self, request: pb.SystemSharedMemoryUnregisterRequest, context: Context
    ) -> Any:
        if self._plane.shared_memory is not None:
            self._plane.shared_memory.unregister(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    @unary
    async def CudaSharedMemoryStatus(
        self, request: pb.CudaSharedMemoryStatusRequest, context: Context
    ) -> Any:
        if request.name:
            raise unknown_region("CUDA", request.name)
        return pb.CudaSharedMemoryStatusResponse()

    @unary
    async def CudaSharedMemoryRegister(
        self, request: pb.CudaSharedMemoryRegisterRequest, context: Context
    ) -> Any:
        raise shared_memory_refusal("CUDA")

    @unary
    async def CudaSharedMemoryUnregister(
        self, request: pb.CudaSharedMemoryUnregisterRequest, context: Context
    ) -> Any:
        return pb.CudaSharedMemoryUnregisterResponse()

    @unary
    async def TraceSetting(self, request: pb.TraceSettingRequest, context: Context) -> Any:
        body = {key: list(value.value) for key, value in request.settings.items()} or None
        answer = await trace_setting_answer(self._plane, request.model_name, body, grpc=True)
        response = pb.TraceSettingResponse()
        for key, value in answer.items():
            response.settings[key].value.extend(value if isinstance(value, list) else [value])
        return response

    @unary
    async def LogSettings(self, request: pb.LogSettingsRequest, context: Context) -> Any:
        if request.settings:
            body = {
                key: getattr(value, value.WhichOneof("parameter_choice") or "string_param")
                for key, value in request.settings.items()
            }
            level = log_level(body)
            if level is not None:
                logging.getLogger("lambdaserve").setLevel(level)
        response = pb.LogSettingsResponse()
        for key, value in log_settings().items():
            setting = response.settings[key]
            if isinstance(value, bool):
                setting.bool_param = value
            elif isinstance(value, int):
                setting.uint32_param = value
            else:
                setting.string_param = str(value)
        return response


def _forget_step(
    last_step: dict[tuple[str, Any], asyncio.Task[None]], key: tuple[str, Any], done: Any
) -> None:
    """A sequence's last step ended: the next one waits for nothing."""
    if last_step.get(key) is done:
        del last_step[key]
