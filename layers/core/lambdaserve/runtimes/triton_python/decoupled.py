"""Decoupled Python models (``model_transaction_policy { decoupled: true }``): ``execute``
answers through each request's response sender, any number of times, the last send flagged
``TRITONSERVER_RESPONSE_COMPLETE_FINAL``. ``execute`` runs in a thread of its own so the
responses reach the caller as they are sent, not when ``execute`` returns.

As in Triton, ``execute`` returning says only that the instance may take the next request:
a model may hand the sender to a thread of its own and send after ``execute`` has returned
(python_backend's repeat example does), so the stream ends at the final flag. Where nothing
can send it any more (no one holds the sender once ``execute`` returned) the stream fails
at once instead of waiting out ``RESPONSE_GAP_S``."""

from __future__ import annotations

import inspect
import queue
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from lambdaserve.errors import InferenceError, LambdaServeError
from lambdaserve.runtimes.triton_python import pb_utils
from lambdaserve.tensors.signature import Arrays

# How long a decoupled model may go between two responses before the call fails
RESPONSE_GAP_S = 300.0
_RETURNED, _DROPPED = object(), object()


def stream_responses(
    instance: Any,
    model_dir: str,
    inputs: Mapping[str, np.ndarray[Any, Any]],
    outputs: Sequence[str],
    answer: Callable[[Any, Sequence[str]], Arrays | LambdaServeError],
) -> Iterator[Arrays]:
    """Every response the model sends to one request; raises the model's error in order."""
    sent: queue.Queue[Any] = queue.Queue()
    _start_execute(instance, model_dir, inputs, outputs, sent)
    returned = False
    while True:
        try:
            item = sent.get(timeout=RESPONSE_GAP_S)
        except queue.Empty:
            after = " (execute had returned)" if returned else ""
            raise InferenceError(
                f"the decoupled model sent nothing for {RESPONSE_GAP_S:.0f} s{after} and no "
                "final flag"
            ) from None
        if item is _RETURNED:  # the sender may still be sending from the model's thread
            returned = True
            continue
        if item is _DROPPED:
            raise InferenceError(
                "execute returned, and no one holds the response sender any more, without "
                "a response flagged TRITONSERVER_RESPONSE_COMPLETE_FINAL"
            )
        if isinstance(item, Exception):
            raise InferenceError(f"the model raised {type(item).__name__}: {item}")
        response, flags = item
        if response is not None:
            arrays = answer(response, outputs)
            if isinstance(arrays, LambdaServeError):
                raise arrays
            yield arrays
        if flags & pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            return


def _start_execute(
    instance: Any,
    model_dir: str,
    inputs: Mapping[str, np.ndarray[Any, Any]],
    outputs: Sequence[str],
    sent: queue.Queue[Any],
) -> None:
    """``execute`` on one request, in a thread: its sends, then its error or its return, then
    (once nothing holds the request's sender: it can never send the final flag) _DROPPED.
    Only the thread holds the request, so the caller's reading keeps no sender alive."""
    request = pb_utils.InferenceRequest(
        inputs=[pb_utils.Tensor(name, array) for name, array in inputs.items()],
        requested_output_names=list(outputs),
    )
    sender = pb_utils.InferenceResponseSender(lambda response, flags: sent.put((response, flags)))
    weakref.finalize(sender, sent.put, _DROPPED)
    request._sender = sender
    del sender

    def run(request: Any) -> None:
        token = pb_utils._model_dir.set(model_dir)
        try:
            returned = instance.execute([request])
            if inspect.iscoroutine(returned):
                import asyncio

                asyncio.run(returned)
        except Exception as exc:
            sent.put(exc)
        finally:
            pb_utils._model_dir.reset(token)
            sent.put(_RETURNED)

    threading.Thread(target=run, args=(request,), name="decoupled-execute", daemon=True).start()


def one_response(responses: Iterator[Arrays]) -> Arrays | LambdaServeError:
    """A decoupled model called where one answer is expected (v2 infer, a queue): its one
    response, or an error saying where its many go."""
    try:
        collected = list(responses)
    except LambdaServeError as exc:
        return exc
    if len(collected) == 1:
        return collected[0]
    return InferenceError(
        f"the decoupled model sent {len(collected)} responses to one request: ask for them "
        "over gRPC ModelStreamInfer or POST .../generate_stream"
    )
