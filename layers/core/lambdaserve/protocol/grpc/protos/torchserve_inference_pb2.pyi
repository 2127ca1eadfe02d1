from google.protobuf import empty_pb2 as _empty_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class PredictionsRequest(_message.Message):
    __slots__ = ("model_name", "model_version", "input", "sequence_id")
    class InputEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    model_version: str
    input: _containers.ScalarMap[str, bytes]
    sequence_id: str
    def __init__(self, model_name: _Optional[str] = ..., model_version: _Optional[str] = ..., input: _Optional[_Mapping[str, bytes]] = ..., sequence_id: _Optional[str] = ...) -> None: ...

class PredictionResponse(_message.Message):
    __slots__ = ("prediction", "sequence_id")
    PREDICTION_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    prediction: bytes
    sequence_id: str
    def __init__(self, prediction: _Optional[bytes] = ..., sequence_id: _Optional[str] = ...) -> None: ...

class TorchServeHealthResponse(_message.Message):
    __slots__ = ("health",)
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    health: str
    def __init__(self, health: _Optional[str] = ...) -> None: ...
