"""Paddle Serving's pipeline gRPC service (``PipelineService.inference``) over the data plane.

Answered as the HTTP route ``POST /{name}/prediction`` answers: string keys and values in,
the outputs as text out, errors in-band (gRPC OK with Paddle's ``err_no``), as Paddle's
pipeline server sends them. ``Request.name`` names the model; Paddle's ``PipelineClient``
leaves it empty (its server runs one pipeline), so an empty name means the one model this
catalog holds, else its one pipeline, and says so when that is ambiguous.
"""

from __future__ import annotations

from typing import Any

import grpc

from lambdaserve.apps.grpc.calls import Context, unary
from lambdaserve.config.runtime_names import PIPELINE_RUNTIME
from lambdaserve.errors import LambdaServeError, ModelNotFound
from lambdaserve.protocol import paddle_pipeline as rest
from lambdaserve.protocol.grpc.protos import paddle_pipeline_pb2 as pb
from lambdaserve.protocol.grpc.protos import paddle_pipeline_pb2_grpc as services
from lambdaserve.protocol.names import check_model_name
from lambdaserve.serving.capture.capture_offers import offer_messages
from lambdaserve.serving.data_plane import InferenceDataPlane

# The runtime name of a Paddle Serving pipeline version (web_service.py + config.yml)


def add_to(server: grpc.aio.Server, plane: InferenceDataPlane) -> None:
    services.add_PipelineServiceServicer_to_server(PipelineServicer(plane), server)


class PipelineServicer(services.PipelineServiceServicer):
    def __init__(self, plane: InferenceDataPlane) -> None:
        self._plane = plane

    @unary
    async def inference(self, request: pb.Request, context: Context) -> Any:
        answered = None
        try:
            answered, document = await self._answer(request)
        except LambdaServeError as exc:
            document = rest.error_response(exc)
        response = pb.Response(
            err_no=document["err_no"],
            err_msg=document["err_msg"],
            key=document["key"],
            value=document["value"],
        )
        if answered is not None:
            await offer_messages(self._plane, *answered, request, response)
        return response

    async def _answer(self, request: pb.Request) -> tuple[tuple[str, int], dict[str, Any]]:
        """The model and version that answered, and Paddle's response document."""
        model = check_model_name(request.name or await self._only_model())
        served = await self._plane.resolve_number(model, None)
        parsed = rest.parse_request(
            {"key": list(request.key), "value": list(request.value), "logid": request.logid},
            served.signature,
        )
        inferred = await self._plane.infer(model, None, parsed)
        return (model, inferred.version), rest.encode_response(inferred.outputs)

    async def _only_model(self) -> str:
        """The model an unnamed request means: the catalog's only model, else its only
        pipeline (Paddle's server runs one pipeline; other models may serve beside it)."""
        names = await self._plane.model_names()
        if len(names) == 1:
            return str(names[0])
        found = await self._plane.models_running(PIPELINE_RUNTIME, names)
        if len(found) == 1:
            return found[0]
        which = f"{len(found)} pipelines ({', '.join(found[:5])})" if found else "no pipeline"
        raise ModelNotFound(
            f"Service name error: the request names no model and this server has "
            f"{len(names)} models ({', '.join(sorted(names)[:5])}) and {which}; set "
            "Request.name to the model (PipelineClient: name=...)"
        )
