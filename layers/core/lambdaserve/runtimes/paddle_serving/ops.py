"""Paddle Serving's pipeline classes as a ``web_service.py`` imports them, unchanged:
``from paddle_serving_server.web_service import WebService, Op`` (and ``RequestOp``,
``ResponseOp``, ``PipelineServer`` from ``paddle_serving_server.pipeline``).

The user's file builds its DAG at import, as Paddle's server does: ``WebService(name=...)``,
``prepare_pipeline_config("config.yml")`` (``get_pipeline_response(read_op)`` returns the last
Op), ``run_service()``. Here nothing listens: ``run_service`` returns, and the pipeline the
file prepared is handed to lambdaserve's executor (``paddle_dag``), which serves it on Paddle's
HTTP route and gRPC ``PipelineService``.

The hooks keep Paddle's contracts: ``preprocess(input_dicts, data_id, log_id)`` returns
``(data, is_skip_process, prod_errcode, prod_errinfo)``, ``process(feed_batch, typical_logid)``
returns ``(fetch_dict, err_code, err_info)``, ``postprocess(input_dicts, fetch_dict, data_id,
log_id)`` returns ``(data, prod_errcode, prod_errinfo)``.
"""

from __future__ import annotations

import enum
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np


class CustomExceptionCode(enum.Enum):
    """Paddle's error numbers (``err_no``), as its ``error_catch`` defines them."""

    OK = 0
    PRODUCT_ERROR = 50
    NOT_IMPLEMENTED = 3000
    CLOSED_ERROR = 3001
    NO_SERVICE = 3002
    INIT_ERROR = 3003
    CONF_ERROR = 4000
    INPUT_PARAMS_ERROR = 5000
    TIMEOUT = 6000
    TYPE_ERROR = 7000
    RPC_PACKAGE_ERROR = 8000
    CLIENT_ERROR = 9000
    UNKNOW = 10000


ChannelDataErrcode = CustomExceptionCode


class CustomException(Exception):
    """Raised by Op code to answer with its own error number."""

    def __init__(self, exceptionCode: Any, errorMsg: str, isSendToUser: bool = False) -> None:
        super().__init__(errorMsg)
        self.error_code = getattr(exceptionCode, "value", exceptionCode)
        self.error_msg = errorMsg


class Op:
    """One step of the pipeline; subclasses override ``init_op`` and the three stages."""

    _counter = 0

    def __init__(  # noqa: PLR0917 (Paddle's own signature: examples pass name, input_ops by position)
        self,
        name: str | None = None,
        input_ops: list[Op] | None = None,
        server_endpoints: list[str] | None = None,
        fetch_list: list[str] | None = None,
        client_config: str | None = None,
        client_type: str | None = None,
        concurrency: int | None = None,
        timeout: int | None = None,
        retry: int | None = None,
        batch_size: int | None = None,
        auto_batching_timeout: int | None = None,
        local_service_handler: Any = None,
        jump_to_ops: list[Op] | None = None,
    ) -> None:
        if name is None:
            name = f"Op{Op._counter}"
            Op._counter += 1
        self.name = name
        self._input_ops: list[Op] = list(input_ops or [])
        if server_endpoints:
            raise NotImplementedError(
                f"op {name!r}: server_endpoints (a remote Paddle server) is not served by "
                "lambdaserve; name the model folder in local_service_conf.model_config"
            )
        self.given: dict[str, Any] = {
            "fetch_list": fetch_list,
            "concurrency": concurrency,
            "timeout": timeout,
            "retry": retry,
            "batch_size": batch_size,
            "auto_batching_timeout": auto_batching_timeout,
        }
        # set by the executor before init_op: the local predictor (None: no model)
        self.client: Any = None
        self._fetch_names: list[str] | None = fetch_list

    def get_input_ops(self) -> list[Op]:
        return self._input_ops

    def add_input_op(self, op: Op) -> None:
        self._input_ops.append(op)

    def set_input_ops(self, ops: list[Op]) -> None:
        self._input_ops = list(ops)

    def init_op(self) -> None:
        """Once, before the first request (Paddle calls it in each worker)."""

    def preprocess(
        self, input_dicts: dict[str, Any], data_id: int = 0, log_id: int = 0
    ) -> tuple[Any, bool, int | None, str]:
        if len(input_dicts) != 1:
            raise CustomException(
                CustomExceptionCode.NOT_IMPLEMENTED,
                f"op {self.name!r} has {len(input_dicts)} inputs: override preprocess to "
                "combine them (input_dicts is keyed by the input ops' names)",
                True,
            )
        ((_, input_dict),) = input_dicts.items()
        return input_dict, False, None, ""

    def process(
        self, feed_batch: list[dict[str, Any]], typical_logid: int = 0
    ) -> tuple[Any, int, str]:
        if self.client is None:
            return feed_batch[0], CustomExceptionCode.OK.value, ""
        return self.client.predict(feed=feed_batch[0], fetch=self._fetch_names, batch=True), 0, ""

    def postprocess(
        self, input_dicts: dict[str, Any], fetch_dict: Any, data_id: int = 0, log_id: int = 0
    ) -> tuple[Any, int | None, str]:
        return (fetch_dict if isinstance(fetch_dict, dict) else {}), None, ""


@dataclass
class PipelineRequest:
    """What ``unpack_request_package`` is given: Paddle's ``Request`` fields."""

    key: list[str]
    value: list[str]
    logid: int = 0
    clientip: str = ""
    name: str = ""
    method: str = "prediction"
    tensors: list[Any] = field(default_factory=list)


@dataclass
class PipelineResponse:
    """What ``pack_response_package`` returns: Paddle's ``Response`` fields."""

    err_no: int = 0
    err_msg: str = ""
    key: list[str] = field(default_factory=list)
    value: list[str] = field(default_factory=list)


class RequestOp(Op):
    """The DAG's entry: the request's key/value lists as one dict of strings."""

    def __init__(self) -> None:
        super().__init__(name="@DAGExecutor")
        self.init_op()

    def unpack_request_package(
        self, request: PipelineRequest
    ) -> tuple[dict[str, Any], int, int | None, str]:
        return dict(zip(request.key, request.value, strict=False)), request.logid, None, ""


class ResponseOp(Op):
    """The DAG's exit: the last Op's dict as the response's key/value lists."""

    def __init__(self, input_ops: list[Op]) -> None:
        super().__init__(name="@DAGExecutor", input_ops=input_ops)
        self.init_op()

    def pack_response_package(self, channeldata_dict: dict[str, Any]) -> PipelineResponse:
        """``channeldata_dict`` maps the last Op's name to its output dict."""
        response = PipelineResponse()
        ((_, data),) = channeldata_dict.items()
        if all(_is_npdata(v) for v in data.values()):
            with np.printoptions(threshold=sys.maxsize):
                for name, var in data.items():
                    response.key.append(name)
                    response.value.append(repr(var))
            return response
        for name, var in data.items():
            if not isinstance(var, str):
                response.err_no = CustomExceptionCode.TYPE_ERROR.value
                response.err_msg = f"@DAGExecutor fetch var type must be str({type(var)})."
                return response
            response.key.append(name)
            response.value.append(var)
        return response


def _is_npdata(value: Any) -> bool:
    return isinstance(value, np.ndarray) or (
        isinstance(value, list) and bool(value) and isinstance(value[0], str)
    )


@dataclass(frozen=True)
class PreparedPipeline:
    """What a web_service.py prepared at import: the exit op and its config document."""

    name: str
    response_op: ResponseOp
    config: dict[str, Any]


class PipelineServer:
    def __init__(self, name: str | None = None) -> None:
        self._name = name or "default_service"
        self._response_op: ResponseOp | None = None

    def set_response_op(self, response_op: ResponseOp) -> None:
        if not isinstance(response_op, ResponseOp) or len(response_op.get_input_ops()) != 1:
            raise TypeError("set_response_op takes a ResponseOp with exactly one input op")
        self._response_op = response_op

    def prepare_server(
        self, yml_file: str | None = None, yml_dict: dict[str, Any] | None = None
    ) -> None:
        if self._response_op is None:
            raise ValueError("call set_response_op before prepare_server")
        _prepared(PreparedPipeline(self._name, self._response_op, _config(yml_file, yml_dict)))

    def run_server(self) -> None:
        """lambdaserve serves the prepared pipeline: nothing to start here."""


class WebService:
    def __init__(self, name: str = "default_service") -> None:
        self.name = name
        self._server = PipelineServer(name)

    def get_pipeline_response(self, read_op: RequestOp) -> Op | None:
        return None

    def prepare_pipeline_config(
        self, yml_file: str | None = None, yml_dict: dict[str, Any] | None = None
    ) -> None:
        read_op = RequestOp()
        last_op = self.get_pipeline_response(read_op)
        if not isinstance(last_op, Op):
            raise ValueError(
                "The return value type of `get_pipeline_response` function is not Op type, "
                "please check function `get_pipeline_response`."
            )
        self._server.set_response_op(ResponseOp(input_ops=[last_op]))
        self._server.prepare_server(yml_file=yml_file, yml_dict=yml_dict)

    def run_service(self) -> None:
        self._server.run_server()


# -- the import of one web_service.py ---------------------------------------------------------

_IMPORTING = threading.Lock()
_current: dict[str, Any] = {}


@contextmanager
def collecting(base_dir: Path) -> Iterator[list[PreparedPipeline]]:
    """While a web_service.py is imported: its relative config paths read from ``base_dir``
    and the pipelines it prepares collected."""
    found: list[PreparedPipeline] = []
    with _IMPORTING:
        _current.update(base_dir=base_dir, found=found)
        try:
            yield found
        finally:
            _current.clear()


def _prepared(pipeline: PreparedPipeline) -> None:
    found = _current.get("found")
    if found is None:
        raise RuntimeError("a pipeline is prepared only while lambdaserve loads web_service.py")
    found.append(pipeline)


def _config(yml_file: str | None, yml_dict: dict[str, Any] | None) -> dict[str, Any]:
    if (yml_file is None) == (yml_dict is None):
        raise ValueError("give exactly one of yml_file and yml_dict")
    if yml_dict is not None:
        return dict(yml_dict)
    import yaml

    base: Path = _current.get("base_dir", Path("."))
    path = (base / yml_file).resolve() if yml_file else base
    if not path.is_relative_to(base.resolve()):
        raise ValueError(f"{yml_file!r} is outside the version directory")
    document = yaml.safe_load(path.read_text())
    return document if isinstance(document, dict) else {}


def install_modules() -> None:
    """``paddle_serving_server.web_service`` and ``.pipeline`` importable by model code, in
    place of Paddle Serving's own (whose ``run_service`` would start a server)."""
    this = sys.modules[__name__]
    root = ModuleType("paddle_serving_server")
    root.__path__ = []  # a package: its submodules are found in sys.modules
    for name in ("web_service", "pipeline", "pipeline.operator", "pipeline.error_catch"):
        sys.modules[f"paddle_serving_server.{name}"] = this
    root.web_service = this  # type: ignore[attr-defined]
    root.pipeline = this  # type: ignore[attr-defined]
    sys.modules["paddle_serving_server"] = root
