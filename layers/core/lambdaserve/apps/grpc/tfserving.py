"""TF Serving's ``PredictionService`` and ``ModelService`` over the inference data plane.

``model_spec`` picks the version as on REST: a number, a label, or the default; Predict runs
through the dynamic batcher like every other door. Classify and Regress answer, as the REST
API does, that the model's signature is a predict one.
"""

from __future__ import annotations

from typing import Any

import grpc

from lambdaserve.apps.grpc.calls import Context, unary
from lambdaserve.errors import InvalidInput, ModelNotFound
from lambdaserve.protocol import tfserving as rest
from lambdaserve.protocol.grpc import tfserving as codec
from lambdaserve.protocol.grpc.protos import tensorflow_serving_pb2 as pb
from lambdaserve.protocol.grpc.protos import tensorflow_serving_pb2_grpc as services
from lambdaserve.protocol.names import check_model_name
from lambdaserve.serving.data_plane import InferenceDataPlane


def add_to(server: grpc.aio.Server, plane: InferenceDataPlane) -> None:
    services.add_PredictionServiceServicer_to_server(PredictionServicer(plane), server)
    services.add_ModelServiceServicer_to_server(ModelServicer(plane), server)


async def _target(plane: InferenceDataPlane, spec: pb.ModelSpec) -> tuple[str, int | None]:
    """The model and version number a ModelSpec names (None: the default version)."""
    model = check_model_name(spec.name)
    choice = spec.WhichOneof("version_choice")
    if choice == "version":
        return model, spec.version.value
    if choice == "version_label":
        return model, await plane.version_number(model, spec.version_label)
    return model, None


class PredictionServicer(services.PredictionServiceServicer):
    def __init__(self, plane: InferenceDataPlane) -> None:
        self._plane = plane

    @unary
    async def Predict(self, request: pb.PredictRequest, context: Context) -> Any:
        model, number = await _target(self._plane, request.model_spec)
        served = await self._plane.resolve_number(model, number)
        decoded = codec.predict_request(request, served.signature)
        inferred = await self._plane.infer(model, number, decoded)
        return codec.predict_response(model, inferred.version, inferred.outputs)

    @unary
    async def GetModelMetadata(self, request: pb.GetModelMetadataRequest, context: Context) -> Any:
        model, number = await _target(self._plane, request.model_spec)
        served = await self._plane.resolve_number(model, number)
        return codec.metadata_response(
            model, served.version, served.signature, list(request.metadata_field)
        )

    @unary
    async def Classify(self, request: pb.ClassificationRequest, context: Context) -> Any:
        raise await self._no_signature(request.model_spec, "classify")

    @unary
    async def Regress(self, request: pb.RegressionRequest, context: Context) -> Any:
        raise await self._no_signature(request.model_spec, "regress")

    async def _no_signature(self, spec: pb.ModelSpec, verb: str) -> InvalidInput:
        model, number = await _target(self._plane, spec)
        await self._plane.resolve_number(model, number)
        return InvalidInput(
            f"the model has no {verb} signature (tensorflow/serving/{verb}); its "
            f'"{rest.SIGNATURE}" signature is a predict one: call Predict'
        )


class ModelServicer(services.ModelServiceServicer):
    def __init__(self, plane: InferenceDataPlane) -> None:
        self._plane = plane

    @unary
    async def GetModelStatus(self, request: pb.GetModelStatusRequest, context: Context) -> Any:
        model, number = await _target(self._plane, request.model_spec)
        versions = await self._plane.versions(model)
        present = sorted(
            ((v, r.state, r.reason) for v, r in versions.items() if r.present),
            reverse=True,  # newest first, as TF Serving lists them
        )
        chosen = [entry for entry in present if number in (None, entry[0])]
        if not chosen:
            what = f"version {number} of model {model}" if number else f"any versions of {model}"
            raise ModelNotFound(f"Could not find {what}")
        return codec.status_response(chosen)
