"""Invoking the infer function's batch entry point within Lambda's payload limit.

A synchronous invoke carries at most 6 MB each way. Requests are split into invokes whose
payload stays under the limit; the infer side keeps its answer under it by storing the
largest response bodies in S3 (``results/<id>``) and returning their keys.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

import orjson

from lambdaserve.batching.assembly import check_invariant
from lambdaserve.errors import InvalidInput, LambdaServeError
from lambdaserve.protocol.http_status import status_for
from lambdaserve.queued.inference import Outcome, RetryableError, run_envelopes
from lambdaserve.queued.results import PayloadStore, RequestEnvelope, parse_envelope
from lambdaserve.serving.capture.data_capture import DataCapture
from lambdaserve.serving.model_server import ModelServer

LAMBDA_PAYLOAD_LIMIT = 6 * 1024 * 1024
# Room for the {"requests": [...]} wrapper and the separators between messages.
_WRAPPER = 1024


def split_by_size(messages: Sequence[bytes], limit: int) -> list[list[int]]:
    """Indexes of ``messages`` grouped so that each group's JSON array fits in ``limit``."""
    groups: list[list[int]] = []
    current: list[int] = []
    size = _WRAPPER
    for index, message in enumerate(messages):
        if current and size + len(message) + 1 > limit:
            groups.append(current)
            current, size = [], _WRAPPER
        current.append(index)
        size += len(message) + 1
    if current:
        groups.append(current)
    return groups


class LambdaInvoker:
    """Deployed: the infer function's batch entry point, invoked synchronously."""

    def __init__(
        self, lambda_client: Any, function_name: str, payload_limit: int = LAMBDA_PAYLOAD_LIMIT
    ) -> None:
        self._lambda = lambda_client
        self._function = function_name
        self._limit = payload_limit

    def invoke(self, envelopes: Sequence[RequestEnvelope]) -> list[Outcome]:
        messages = [orjson.dumps(e.to_message()) for e in envelopes]
        outcomes: list[Outcome | None] = [None] * len(envelopes)
        for group in split_by_size(messages, self._limit):
            if len(group) == 1 and len(messages[group[0]]) + _WRAPPER > self._limit:
                outcomes[group[0]] = Outcome(
                    413,
                    error=f"the request is {len(messages[group[0]])} bytes, over the "
                    f"{self._limit}-byte invoke limit; send it through the HTTP API, which "
                    "stores large bodies in S3",
                )
                continue
            payload = b'{"requests":[' + b",".join(messages[i] for i in group) + b"]}"
            try:
                answers = self._invoke(payload, len(group))
            except RetryableError as exc:
                # This invoke failed; the other groups' answers still stand.
                answers = [Outcome(503, error=str(exc), retry=True) for _ in group]
            for index, outcome in zip(group, answers, strict=True):
                outcomes[index] = outcome
        done = [o for o in outcomes if o is not None]
        check_invariant(len(envelopes), done)
        return done

    def _invoke(self, payload: bytes, count: int) -> list[Outcome]:
        try:
            response = self._lambda.invoke(FunctionName=self._function, Payload=payload)
        except Exception as exc:  # throttling, network, payload refused
            raise RetryableError(f"invoking {self._function} failed: {exc}") from exc
        body = orjson.loads(response["Payload"].read())
        if response.get("FunctionError"):
            raise RetryableError(f"{self._function} failed: {body.get('errorMessage', body)}")
        outcomes = [
            Outcome(
                int(r["status"]),
                body=_body(r),
                error=r.get("error", ""),
                retry=bool(r.get("retry", False)),
                body_key=r.get("body_key"),
                header_length=r.get("header_length"),
            )
            for r in body["results"]
        ]
        check_invariant(count, outcomes)
        return outcomes


def _body(result: dict[str, Any]) -> bytes | None:
    if "body_base64" in result:
        return base64.b64decode(result["body_base64"])
    return orjson.dumps(result["response"]) if "response" in result else None


def result_entry(request_id: str, outcome: Outcome) -> dict[str, Any]:
    """One result of the batch entry point's answer (plain JSON for the Lambda runtime)."""
    if outcome.body is not None and outcome.header_length is not None:
        return {
            "id": request_id,
            "status": 200,
            "body_base64": base64.b64encode(outcome.body).decode(),
            "header_length": outcome.header_length,
        }
    if outcome.body is not None:
        return {"id": request_id, "status": 200, "response": orjson.loads(outcome.body)}
    entry: dict[str, Any] = {"status": outcome.http_status, "error": outcome.error}
    if outcome.retry:
        entry["retry"] = True
    return entry


Answered = tuple[str, Outcome] | dict[str, Any]  # (request id, outcome), or a ready entry


def answer_batch(
    answers: Sequence[Answered], store: PayloadStore, limit: int = LAMBDA_PAYLOAD_LIMIT
) -> list[dict[str, Any]]:
    """The batch entry point's results, kept under ``limit`` as Lambda's runtime writes them:
    the largest bodies move to S3 ``results/<id>`` as they are, never decoded or re-encoded."""
    sizes = [_wire_size(answer) for answer in answers]
    total = sum(sizes) + _WRAPPER
    bodies = [i for i, a in enumerate(answers) if isinstance(a, tuple) and a[1].body is not None]
    spilled: set[int] = set()
    for index in sorted(bodies, key=lambda i: sizes[i], reverse=True):
        if total <= limit:
            break
        spilled.add(index)
        total -= sizes[index] - _STORED_SIZE
    results = []
    for index, answer in enumerate(answers):
        if isinstance(answer, dict):
            results.append(answer)
            continue
        request_id, outcome = answer
        if index not in spilled:
            results.append(result_entry(request_id, outcome))
            continue
        assert outcome.body is not None
        stored: dict[str, Any] = {
            "status": 200,
            "body_key": store.put_result(request_id, outcome.body),
        }
        if outcome.header_length is not None:
            stored["header_length"] = outcome.header_length
        results.append(stored)
    return results


# {"status": 200, "body_key": "results/<id>", "header_length": N} in the runtime's spelling
_STORED_SIZE = 256


def _wire_size(answer: Answered) -> int:
    """An upper bound of the answer's size in the Lambda runtime's JSON, from the bytes at
    hand (a response body is sized as it is, not decoded to find out)."""
    if isinstance(answer, dict):
        return runtime_json_size(orjson.dumps(answer)) + 2
    request_id, outcome = answer
    overhead = len(request_id) + 128
    if outcome.body is None:
        return runtime_json_size(orjson.dumps(result_entry(request_id, outcome))) + 2
    if outcome.header_length is not None:
        return (len(outcome.body) + 2) // 3 * 4 + overhead
    return runtime_json_size(outcome.body) + overhead


def runtime_json_size(compact: bytes) -> int:
    """An upper bound of the size Lambda's Python runtime gives this value: its ``json.dumps``
    puts a space after every separator and escapes non-ASCII as ``\\uXXXX``."""
    non_ascii = len(compact) - len(compact.decode("utf-8").encode("ascii", "ignore"))
    return len(compact) + compact.count(b",") + compact.count(b":") + 5 * non_ascii


def answer_envelopes(
    server: ModelServer,
    payloads: PayloadStore,
    event: dict[str, Any],
    capture: DataCapture | None = None,
) -> list[dict[str, Any]]:
    """The infer function's batch call: ``{"requests": [envelope, ...]}`` -> N results, in
    order. An envelope is a v2 request plus ``model_name`` (and optional ``model_version``,
    ``id``), or ``payload_key`` pointing at a large request in S3. Each result is
    ``{"status": 200, "response": <v2 response>}`` (binary: ``body_base64`` and
    ``header_length``; moved to S3 to stay under 6 MB: ``body_key``) or
    ``{"status": 4xx/5xx, "error": ...}``."""
    requests = event.get("requests")
    if not isinstance(requests, list):
        raise InvalidInput('the batch event needs "requests": a list of request envelopes')
    envelopes: list[RequestEnvelope] = []
    answers: list[Answered | None] = []
    for raw in requests:
        try:
            envelopes.append(parse_envelope(orjson.dumps(raw)))
            answers.append(None)
        except LambdaServeError as exc:
            answers.append({"status": status_for(exc), "error": exc.message})
    outcomes = iter(run_envelopes(server, payloads, envelopes, capture))
    pending = iter(envelopes)
    filled: list[Answered] = [
        answer if answer is not None else (next(pending).id, next(outcomes)) for answer in answers
    ]
    return answer_batch(filled, payloads)
