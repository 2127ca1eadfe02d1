from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Tensor(_message.Message):
    __slots__ = ("int64_data", "float_data", "int_data", "float64_data", "uint32_data", "bool_data", "complex64_data", "complex128_data", "str_data", "byte_data", "elem_type", "shape", "lod", "name")
    INT64_DATA_FIELD_NUMBER: _ClassVar[int]
    FLOAT_DATA_FIELD_NUMBER: _ClassVar[int]
    INT_DATA_FIELD_NUMBER: _ClassVar[int]
    FLOAT64_DATA_FIELD_NUMBER: _ClassVar[int]
    UINT32_DATA_FIELD_NUMBER: _ClassVar[int]
    BOOL_DATA_FIELD_NUMBER: _ClassVar[int]
    COMPLEX64_DATA_FIELD_NUMBER: _ClassVar[int]
    COMPLEX128_DATA_FIELD_NUMBER: _ClassVar[int]
    STR_DATA_FIELD_NUMBER: _ClassVar[int]
    BYTE_DATA_FIELD_NUMBER: _ClassVar[int]
    ELEM_TYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    LOD_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    int64_data: _containers.RepeatedScalarFieldContainer[int]
    float_data: _containers.RepeatedScalarFieldContainer[float]
    int_data: _containers.RepeatedScalarFieldContainer[int]
    float64_data: _containers.RepeatedScalarFieldContainer[float]
    uint32_data: _containers.RepeatedScalarFieldContainer[int]
    bool_data: _containers.RepeatedScalarFieldContainer[bool]
    complex64_data: _containers.RepeatedScalarFieldContainer[float]
    complex128_data: _containers.RepeatedScalarFieldContainer[float]
    str_data: _containers.RepeatedScalarFieldContainer[str]
    byte_data: bytes
    elem_type: int
    shape: _containers.RepeatedScalarFieldContainer[int]
    lod: _containers.RepeatedScalarFieldContainer[int]
    name: str
    def __init__(self, int64_data: _Optional[_Iterable[int]] = ..., float_data: _Optional[_Iterable[float]] = ..., int_data: _Optional[_Iterable[int]] = ..., float64_data: _Optional[_Iterable[float]] = ..., uint32_data: _Optional[_Iterable[int]] = ..., bool_data: _Optional[_Iterable[bool]] = ..., complex64_data: _Optional[_Iterable[float]] = ..., complex128_data: _Optional[_Iterable[float]] = ..., str_data: _Optional[_Iterable[str]] = ..., byte_data: _Optional[bytes] = ..., elem_type: _Optional[int] = ..., shape: _Optional[_Iterable[int]] = ..., lod: _Optional[_Iterable[int]] = ..., name: _Optional[str] = ...) -> None: ...

class Request(_message.Message):
    __slots__ = ("key", "value", "tensors", "name", "method", "logid", "clientip")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    LOGID_FIELD_NUMBER: _ClassVar[int]
    CLIENTIP_FIELD_NUMBER: _ClassVar[int]
    key: _containers.RepeatedScalarFieldContainer[str]
    value: _containers.RepeatedScalarFieldContainer[str]
    tensors: _containers.RepeatedCompositeFieldContainer[Tensor]
    name: str
    method: str
    logid: int
    clientip: str
    def __init__(self, key: _Optional[_Iterable[str]] = ..., value: _Optional[_Iterable[str]] = ..., tensors: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ..., name: _Optional[str] = ..., method: _Optional[str] = ..., logid: _Optional[int] = ..., clientip: _Optional[str] = ...) -> None: ...

class Response(_message.Message):
    __slots__ = ("err_no", "err_msg", "key", "value", "tensors")
    ERR_NO_FIELD_NUMBER: _ClassVar[int]
    ERR_MSG_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    err_no: int
    err_msg: str
    key: _containers.RepeatedScalarFieldContainer[str]
    value: _containers.RepeatedScalarFieldContainer[str]
    tensors: _containers.RepeatedCompositeFieldContainer[Tensor]
    def __init__(self, err_no: _Optional[int] = ..., err_msg: _Optional[str] = ..., key: _Optional[_Iterable[str]] = ..., value: _Optional[_Iterable[str]] = ..., tensors: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ...) -> None: ...
