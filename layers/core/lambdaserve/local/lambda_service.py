"""Lambda's Invoke in the embedded emulator, answered by functions the local stack runs.

Deployed, the manage function checks a new version by invoking the infer function's alias,
and the batcher invokes the batch function: calls through Lambda's API, under the caller's
role. moto's Lambda would start the function's image in Docker; here each invoke is handed
to ``route`` (the function's physical name or ARN, its qualifier, the payload, the caller's
X-Ray trace header), which runs
the function where the stack runs it and returns its answer, or raises ``FunctionFailed``
for what Lambda reports as a function error.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote

from lambdaserve.errors import LambdaServeError

# (name or ARN, qualifier, payload, the invoke's X-Amzn-Trace-Id) -> the answer
Route = Callable[[str, str | None, bytes, str | None], bytes]


class FunctionFailed(LambdaServeError):
    """The invoked function raised: Lambda answers 200 with X-Amz-Function-Error."""


def function_arn(region: str, account: str, name: str, qualifier: str | None = None) -> str:
    """The ARN an invoke of ``name`` (a name, or already an ARN) is authorized on."""
    base = name if name.startswith("arn:") else f"arn:aws:lambda:{region}:{account}:function:{name}"
    return f"{base}:{qualifier}" if qualifier and base.count(":") == 6 else base


@contextmanager
def lambda_invokes(route: Route) -> Iterator[None]:
    """Every synchronous Invoke of any emulator in this process goes to ``route``."""
    from moto.awslambda.responses import LambdaResponse

    original = LambdaResponse.invoke

    def invoke(handler: Any) -> tuple[int, dict[str, str], bytes]:
        name = unquote(handler.path.rsplit("/", 2)[-2])
        qualifier = (
            handler._get_param("qualifier") or handler.querystring.get("Qualifier", [None])[0]
        )
        body = handler.body if isinstance(handler.body, bytes) else str(handler.body).encode()
        headers = {"content-type": "application/json"}
        try:
            trace = handler.headers.get("X-Amzn-Trace-Id")  # the caller's X-Ray context
            return 200, headers, route(name, qualifier, body, trace)
        except FunctionFailed as error:
            failure = {"errorMessage": str(error), "errorType": "Unhandled"}
            return (
                200,
                headers | {"x-amz-function-error": "Unhandled"},
                json.dumps(failure).encode(),
            )

    LambdaResponse.invoke = invoke
    try:
        yield
    finally:
        LambdaResponse.invoke = original
