"""TF Serving's ``PredictionService`` and ``ModelService`` over the inference data plane.

``model_spec`` picks the version as on REST: a number, a label, or the default, and its
``signature_name`` the signature (every one of a SavedModel TensorFlow serves); Predict to the
default signature runs through the dynamic batcher like every other door. Classify, Regress
and MultiInference run serialized tf.Examples through a signature taking them
(``apps.tf_signatures``, shared with REST).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import grpc
from google.protobuf.message import Message

from lambdaserve.apps.grpc.calls import Context, unary
from lambdaserve.apps.tf_signatures import examples_results, named_signature, run_named
from lambdaserve.errors import InvalidInput, ModelNotFound
from lambdaserve.protocol.grpc import tfserving as codec
from lambdaserve.protocol.grpc.protos import tensorflow_serving_pb2 as pb
from lambdaserve.protocol.grpc.protos import tensorflow_serving_pb2_grpc as services
from lambdaserve.protocol.names import check_model_name
from lambdaserve.protocol.tf_examples import CLASSIFY, REGRESS
from lambdaserve.serving import signatures
from lambdaserve.serving.capture.capture_offers import GRPC, offer_served
from lambdaserve.serving.data_plane import InferenceDataPlane
from lambdaserve.serving.version_resolver import ServedVersion


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
        served, named = await named_signature(
            self._plane, model, number, request.model_spec.signature_name
        )
        decoded = codec.predict_request(request, named.signature)
        outputs = await run_named(
            self._plane, model, number, served=served, named=named, request=decoded
        )
        response = codec.predict_response(model, served.version, outputs, named.key)
        self._capture(served, request, response)
        return response

    @unary
    async def GetModelMetadata(self, request: pb.GetModelMetadataRequest, context: Context) -> Any:
        model, number = await _target(self._plane, request.model_spec)
        served = await self._plane.resolve_number(model, number)
        defs = await self._plane.call(
            model, served.version, partial(signatures.signature_defs, self._plane.server(), served)
        )
        return codec.metadata_response(model, served.version, defs, list(request.metadata_field))

    @unary
    async def Classify(self, request: pb.ClassificationRequest, context: Context) -> Any:
        served, spec, results = await self._examples(request.model_spec, request.input, CLASSIFY)
        response = pb.ClassificationResponse(
            model_spec=spec, result=codec.classification_result(results)
        )
        self._capture(served, request, response)
        return response

    @unary
    async def Regress(self, request: pb.RegressionRequest, context: Context) -> Any:
        served, spec, results = await self._examples(request.model_spec, request.input, REGRESS)
        response = pb.RegressionResponse(model_spec=spec, result=codec.regression_result(results))
        self._capture(served, request, response)
        return response

    @unary
    async def MultiInference(self, request: pb.MultiInferenceRequest, context: Context) -> Any:
        """Each task (one model, a classify or regress method, distinct signatures) on the
        same examples, answered in order, as TF Serving's MultiInference."""
        if not request.tasks:
            raise InvalidInput("MultiInferenceRequest has no tasks: add one per signature")
        names = {task.model_spec.name for task in request.tasks}
        keys = [task.model_spec.signature_name for task in request.tasks]
        if len(names) != 1 or len(set(keys)) != len(keys):
            raise InvalidInput(
                "every task must name the same model and a different signature; "
                f"the tasks name models {sorted(names)} and signatures {keys}"
            )
        response = pb.MultiInferenceResponse()
        served = None
        for task in request.tasks:
            verb = task.method_name.rsplit("/", 1)[-1]
            if verb not in (CLASSIFY, REGRESS):
                raise InvalidInput(
                    f"task method_name {task.method_name!r}: MultiInference runs "
                    "tensorflow/serving/classify and tensorflow/serving/regress tasks"
                )
            served, spec, results = await self._examples(task.model_spec, request.input, verb)
            result = response.results.add(model_spec=spec)
            if verb == CLASSIFY:
                result.classification_result.CopyFrom(codec.classification_result(results))
            else:
                result.regression_result.CopyFrom(codec.regression_result(results))
        if served is not None:  # one exchange, kept under the version that answered
            self._capture(served, request, response)
        return response

    def _capture(self, served: ServedVersion, request: Message, response: Message) -> None:
        """The messages as they travel, where the version captures and the sample takes it."""
        offer_served(
            self._plane.capture,
            served,
            (request.SerializeToString, GRPC),
            (response.SerializeToString, GRPC),
        )

    async def _examples(
        self, spec: pb.ModelSpec, message: pb.Input, verb: str
    ) -> tuple[ServedVersion, pb.ModelSpec, Any]:
        """The version, answering ModelSpec and TF Serving's results for ``verb``."""
        model, number = await _target(self._plane, spec)
        examples = codec.serialized_examples(message)
        served, named, document = await examples_results(
            self._plane, model, number, name=spec.signature_name, verb=verb, examples=examples
        )
        answered = pb.ModelSpec()
        codec.fill_spec(answered, model, served.version, named.key)
        return served, answered, document["results"]


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
