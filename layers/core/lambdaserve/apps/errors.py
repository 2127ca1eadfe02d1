"""The FastAPI app's exception handlers: domain errors through ``protocol.http_status``'s
one table, as ``{"error": ...}`` bodies."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.routing import Match

from lambdaserve.errors import LambdaServeError
from lambdaserve.protocol.http_status import INTERNAL_ERROR, status_for
from lambdaserve.protocol.torchserve_errors import error_document

logger = logging.getLogger(__name__)

__all__ = ["error_response", "install_error_handlers", "status_for"]


def error_response(status: int, message: str, path: str = "") -> JSONResponse:
    """``{"error": ...}``; on TorchServe's routes (``path``) its ErrorResponse shape too."""
    return JSONResponse(status_code=status, content=error_document(path, status, message))


def install_error_handlers(app: FastAPI) -> None:
    """Domain errors, request validation (400, as Triton answers) and the rest."""

    @app.exception_handler(LambdaServeError)
    async def _domain(request: Request, exc: LambdaServeError) -> JSONResponse:
        response = error_response(status_for(exc), exc.message, request.url.path)
        response.headers.update(dict(exc.headers))
        return response

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()) if p != 'body') or 'body'}: {e.get('msg')}"
            for e in exc.errors()
        )
        return error_response(400, f"invalid request: {problems}", request.url.path)

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        response = error_response(exc.status_code, str(exc.detail), request.url.path)
        response.headers.update(exc.headers or {})
        if exc.status_code == 405:
            response.headers["allow"] = allowed_methods(request)
        return response

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, INTERNAL_ERROR, request.url.path)


def allowed_methods(request: Request) -> str:
    """The Allow header of a 405: every method some route answers at this path. Starlette's
    names only the first route whose path matched, and FastAPI makes a route per decorator."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches(request.scope)
        if match is not Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    return ", ".join(sorted(methods))
