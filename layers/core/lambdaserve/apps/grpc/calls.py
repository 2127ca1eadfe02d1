"""How a servicer's call ends: a domain error becomes its gRPC status with the same message as
HTTP's; anything else is logged and answered INTERNAL (never a dead stream or server)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, TypeAlias, TypeVar

import grpc

from lambdaserve.errors import LambdaServeError
from lambdaserve.protocol.grpc.status import code_for
from lambdaserve.protocol.http_status import INTERNAL_ERROR
from lambdaserve.protocol.request_headers import VERSION_HEADER, answered_version, forget, receive

logger = logging.getLogger(__name__)
# grpc.aio.ServicerContext: grpcio ships no type information
Context: TypeAlias = Any
T = TypeVar("T")
Request = TypeVar("Request")
Servicer = TypeVar("Servicer")
Method = Callable[[Servicer, Request, grpc.aio.ServicerContext], Awaitable[Any]]


async def answered(context: Context, work: Awaitable[T]) -> T:
    """``work``'s result, or the call aborted with the status its error maps to. The call's
    metadata is the request's headers (a weighted label's ``sticky`` one), and the version
    that answered is said in the trailing metadata."""
    token = receive(context)
    try:
        done = await work
        version = answered_version()
        if version is not None:
            context.set_trailing_metadata(((VERSION_HEADER, str(version)),))
        return done
    except LambdaServeError as exc:
        await _abort(context, code_for(exc), exc.message)
    except grpc.aio.AbortError:
        raise
    except Exception:
        logger.exception("gRPC call failed")
        await _abort(context, grpc.StatusCode.INTERNAL, INTERNAL_ERROR)
    finally:
        forget(token)


def unary(method: Method[Servicer, Request]) -> Method[Servicer, Request]:
    """A unary RPC whose domain errors end it with their status code and message."""

    @functools.wraps(method)
    async def call(self: Servicer, request: Request, context: Context) -> Any:
        return await answered(context, method(self, request, context))

    return call


def error_text(exc: BaseException) -> str:
    """What a stream's in-band error says: a domain error's message, else its kind."""
    if isinstance(exc, LambdaServeError):
        return exc.message
    logger.error("gRPC stream request failed", exc_info=exc)
    return INTERNAL_ERROR


async def _abort(context: Context, code: grpc.StatusCode, text: str) -> NoReturn:
    await context.abort(code, text)
    raise AssertionError("context.abort returns only by raising")
