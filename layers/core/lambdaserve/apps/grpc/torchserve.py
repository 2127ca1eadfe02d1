"""TorchServe's gRPC APIs over the inference data plane and the model manager.

``InferenceAPIsService``: Ping, Predictions (the request's ``input`` fields reach a handler
as a multipart request's fields would; a tensor model reads its one field as the JSON body
of ``/predictions``, through the dynamic batcher), StreamPredictions and StreamPredictions2
(one response per request: lambdaserve's handlers do not stream). ``ManagementAPIsService``:
describe, list and set-default as the HTTP management API answers them; register, scale and
unregister answered as it answers them; only where management is enabled.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from google.protobuf import empty_pb2

from lambdaserve.apps.grpc.calls import Context, answered, unary
from lambdaserve.apps.management import describe_answer, set_default_status
from lambdaserve.apps.torchserve_management import SCALING, refuse_scaling, registration_refusal
from lambdaserve.apps.worker_scaling import scaled
from lambdaserve.config.runtime_names import HANDLER_RUNTIME
from lambdaserve.errors import InvalidInput, ModelNotReady
from lambdaserve.protocol import torchserve as rest
from lambdaserve.protocol.grpc.protos import torchserve_inference_pb2 as pb
from lambdaserve.protocol.grpc.protos import torchserve_inference_pb2_grpc as inference
from lambdaserve.protocol.grpc.protos import torchserve_management_pb2 as mpb
from lambdaserve.protocol.grpc.protos import torchserve_management_pb2_grpc as management
from lambdaserve.protocol.names import check_model_name
from lambdaserve.publishing.management import DEFAULT_PAGE, ModelManager
from lambdaserve.runtimes.torchserve.context import SEQUENCE_ID_HEADER
from lambdaserve.serving.capture.capture_offers import GRPC, offer_messages, offer_served
from lambdaserve.serving.data_plane import InferenceDataPlane
from lambdaserve.serving.raw_predictions import RawRequest, handler_sequence, takes_raw


def add_to(
    server: grpc.aio.Server,
    plane: InferenceDataPlane,
    manager: Callable[[], ModelManager] | None,
) -> None:
    inference.add_InferenceAPIsServiceServicer_to_server(InferenceServicer(plane), server)
    if manager is not None:
        management.add_ManagementAPIsServiceServicer_to_server(
            ManagementServicer(manager, plane), server
        )


class InferenceServicer(inference.InferenceAPIsServiceServicer):
    def __init__(self, plane: InferenceDataPlane) -> None:
        self._plane = plane

    @unary
    async def Ping(self, request: empty_pb2.Empty, context: Context) -> Any:
        healthy = await self._plane.ready()
        status = "Healthy" if healthy else "Unhealthy"
        return pb.TorchServeHealthResponse(health=json.dumps({"status": status}, indent=2))

    @unary
    async def Predictions(self, request: pb.PredictionsRequest, context: Context) -> Any:
        return await self._predict(request)

    async def StreamPredictions(
        self, request: pb.PredictionsRequest, context: Context
    ) -> AsyncIterator[pb.PredictionResponse]:
        yield await answered(context, self._predict(request))

    async def StreamPredictions2(
        self, requests: AsyncIterator[pb.PredictionsRequest], context: Context
    ) -> AsyncIterator[pb.PredictionResponse]:
        async for request in requests:
            yield await answered(context, self._predict(request))

    async def _predict(self, request: pb.PredictionsRequest) -> pb.PredictionResponse:
        model = check_model_name(request.model_name)
        # TorchServe's string versions ("1.0") are version labels here, as on HTTP
        number = await self._plane.version_number(model, request.model_version)
        served = await self._plane.resolve_number(model, number)
        fields = tuple((name, bytearray(value)) for name, value in request.input.items())
        if not fields:
            raise InvalidInput('the request has no input; send e.g. input={"data": <bytes>}')
        if takes_raw(served):
            # a sequenceBatching handler's id: the request's, else minted, as on HTTP
            given = {SEQUENCE_ID_HEADER: request.sequence_id} if request.sequence_id else {}
            sequence = (
                await self._plane.call(
                    model, number, lambda: handler_sequence(self._plane.server(), served, given)
                )
                if served.record.runtime == HANDLER_RUNTIME
                else None
            )
            headers = given if sequence is None else {SEQUENCE_ID_HEADER: sequence}
            # through the handler's batch lane where its archive sets batchSize, as on HTTP
            answer = await self._plane.predict_raw(served, RawRequest(fields, headers))
            response = pb.PredictionResponse(
                prediction=answer.body, sequence_id=sequence or request.sequence_id
            )
            if answer.status < 300:  # the messages as they travel, as HTTP keeps its bytes
                offer_served(
                    self._plane.capture,
                    served,
                    (request.SerializeToString, GRPC),
                    (response.SerializeToString, GRPC),
                )
            return response
        if len(fields) != 1:
            raise InvalidInput(
                f"model {model!r} takes tensors: send one input field holding the JSON body "
                f"that POST /predictions/{model} takes; got {len(fields)} fields"
            )
        prediction = rest.parse_prediction(bytes(fields[0][1]), served.signature.inputs)
        inferred = await self._plane.infer(model, number, prediction.request)
        body = rest.encode_prediction(dict(inferred.outputs), prediction.single_instance)
        response = pb.PredictionResponse(prediction=body, sequence_id=request.sequence_id)
        if self._plane.capture is not None:  # no coroutine on the hot path when off
            await offer_messages(
                self._plane, model, inferred.version, request, response, served=inferred.served
            )
        return response


class ManagementServicer(management.ManagementAPIsServiceServicer):
    def __init__(self, manager: Callable[[], ModelManager], plane: InferenceDataPlane) -> None:
        self._manager = manager
        self._plane = plane

    @unary
    async def DescribeModel(self, request: mpb.DescribeModelRequest, context: Context) -> Any:
        version = None if request.model_version in ("", "all") else request.model_version
        answer = await asyncio.to_thread(
            describe_answer,
            self._manager(),
            request.model_name,
            version,
            request.customized,
            self._plane.server(),
        )
        return _answer(answer)

    @unary
    async def ListModels(self, request: mpb.ListModelsRequest, context: Context) -> Any:
        manager = self._manager()
        token = str(request.next_page_token) if request.next_page_token else None
        names, after = await asyncio.to_thread(
            manager.list_models, request.limit or DEFAULT_PAGE, token
        )
        body: dict[str, Any] = {
            "models": [{"modelName": n, "modelUrl": manager.repository.url(n)} for n in names]
        }
        if after:
            body["nextPageToken"] = after
        return _answer(body)

    @unary
    async def SetDefault(self, request: mpb.SetDefaultRequest, context: Context) -> Any:
        manager = self._manager()
        name = check_model_name(request.model_name)

        def set_default() -> str:
            number = manager.version_number(name, request.model_version)
            manager.set_default(name, number)
            return set_default_status(manager, name, number)

        status = await asyncio.to_thread(set_default)
        self._plane.forget(name)
        return _answer({"status": status})

    @unary
    async def RegisterModel(self, request: mpb.RegisterModelRequest, context: Context) -> Any:
        raise registration_refusal(request.url)

    @unary
    async def ScaleWorker(self, request: mpb.ScaleWorkerRequest, context: Context) -> Any:
        # the fields set are the HTTP call's query parameters; none set still asks to scale
        query = {f.name: "1" for f, _ in request.ListFields() if f.name in SCALING}
        query = query or {"min_worker": "1"}
        numbers = {"min_worker": request.min_worker, "max_worker": request.max_worker}
        asked = {k: str(v) for k, v in numbers.items() if k in query}
        if request.synchronous:
            asked["synchronous"] = "true"
        done = await asyncio.to_thread(
            scaled, self._plane.server(), request.model_name, request.model_version or None, asked
        )
        if done is not None:
            return _answer(done[1])
        await asyncio.to_thread(
            refuse_scaling,
            request.model_name,
            query,
            self._manager(),
            request.model_version or None,
        )
        raise InvalidInput("there are no workers to scale")  # refuse_scaling always raises

    @unary
    async def UnregisterModel(self, request: mpb.UnregisterModelRequest, context: Context) -> Any:
        manager = self._manager()
        name = check_model_name(request.model_name)

        def delete() -> tuple[int, int]:
            if request.model_version:
                number = manager.version_number(name, request.model_version)
            else:
                default = manager.view(name).default_version
                if default is None:
                    raise ModelNotReady(f"model {name!r} has no default (READY) version to delete")
                number = default
            return number, manager.delete_version(name, number)

        number, deleted = await asyncio.to_thread(delete)
        return _answer(
            {
                "status": f'Deleting version {number} of model "{name}": {deleted} objects '
                "removed; the catalog follows through repository events",
                "deletedObjects": deleted,
            }
        )


def _answer(body: Any) -> mpb.ManagementResponse:
    """TorchServe's gRPC management answers carry the HTTP API's JSON as text."""
    return mpb.ManagementResponse(msg=json.dumps(body, indent=2))
