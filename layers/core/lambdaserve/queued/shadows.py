"""Shadow traffic on the Lambda path: a weighted label's shadow copy leaves the infer function
as a message on the requests queue, marked ``shadow_of`` the version that answered; the
batcher runs it on the shadow version and records it through payload capture
(``queued.inference``), and keeps no result.

A Lambda instance freezes once it has answered, so the copy cannot run there after the
answer. The send happens on a thread of its own: a full queue of copies (``max_pending``)
drops one, counted, and a send that fails is logged and counted, never the client's error.
The copies go to the last priority level's queue, behind every request a client waits for.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import orjson

from lambdaserve.protocol.v2 import InferRequest
from lambdaserve.queued.results import INLINE_LIMIT, RequestEnvelope
from lambdaserve.serving.capture.shadow import ShadowQueue, request_body


class QueuedShadows(ShadowQueue):
    """Shadow copies sent to the requests queue: ``send`` puts one message body on the last
    level's queue, ``store`` keeps a body too large to travel inline (``requests/<id>``,
    returning its key). The composition root makes both lazily: no cold start pays for
    the clients."""

    def __init__(
        self,
        send: Callable[[str], None],
        store: Callable[[str, bytes], str],
        *,
        max_pending: int = 64,
    ) -> None:
        super().__init__(self._send, max_pending=max_pending, threads=1)
        self._send_message = send
        self._store = store

    def _send(self, model: str, version: int, request: InferRequest, primary: int) -> None:
        copy_id = uuid.uuid4().hex
        body = request_body(request)
        envelope = RequestEnvelope(
            id=copy_id, model_name=model, model_version=version, shadow_of=primary
        )
        if len(body) > INLINE_LIMIT:
            envelope.payload_key = self._store(copy_id, body)
        else:
            document = orjson.loads(body)
            envelope.request_id = document.pop("id", None)
            envelope.request = document
        self._send_message(orjson.dumps(envelope.to_message()).decode())
