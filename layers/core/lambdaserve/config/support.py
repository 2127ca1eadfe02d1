"""Which parts of a Triton config lambdaserve applies, refuses, or accepts and ignores.

Refused (the model cannot serve as its config says, so it never becomes READY and fails
later): decoupled transactions outside Python models, and the parts of sequence batching
that are not served (``config.sequence_batching`` says which). Accepted but not applied, or
applied on some paths only (``serve`` and ``dev``, not the infer function): said in the catalog
entry as warnings.
"""

from __future__ import annotations

from typing import Any

from lambdaserve.config.unapplied_fields import unapplied
from lambdaserve.errors import InvalidInput

_IGNORED = {
    "optimization": "optimization settings are not applied (ONNX Runtime uses its defaults)",
    "model_repository_agents": "model_repository_agents are not applied (no agent runs)",
    "model_operations": "model_operations are not applied",
    "model_metrics": "model_metrics are not applied (see /metrics for what is exposed)",
}


def check_supported(document: dict[str, Any]) -> None:
    """InvalidInput for what the model would need and lambdaserve cannot do."""
    sequences = document.get("sequence_batching")
    if (sequences or {}).get("iterative_sequence"):
        raise InvalidInput(
            "sequence_batching iterative_sequence is not supported: a request cannot be "
            "rescheduled here; send each step of the sequence as its own request"
        )
    decoupled = (document.get("model_transaction_policy") or {}).get("decoupled")
    if decoupled and document.get("backend") != "python":
        raise InvalidInput(
            "decoupled models (model_transaction_policy.decoupled) are served for Python "
            'models (backend: "python") only: other runtimes give one response per request'
        )


def warnings_for(document: dict[str, Any]) -> list[str]:
    """What the config asks for that lambdaserve accepts and does not apply."""
    warnings = [text for key, text in _IGNORED.items() if document.get(key)]
    if document.get("sequence_batching") is not None and (
        (document.get("response_cache") or {}).get("enable")
    ):
        warnings.append(
            "response_cache is not applied to a sequence model: a step's answer depends on "
            "its sequence's state, not on its inputs alone"
        )
    warnings += _not_on_the_lambda_path(document)
    for group in document.get("instance_group") or []:
        if group.get("kind") == "KIND_GPU":
            warnings.append(
                "instance_group KIND_GPU runs on a GPU only where there is one (the ECS GPU "
                "service, `lambdaserve serve` on a GPU host): the infer function and `lambdaserve "
                "dev` without CUDA run it on CPU, and log so when they load it"
            )
    return warnings + unapplied(document)


def _not_on_the_lambda_path(document: dict[str, Any]) -> list[str]:
    """Fields `serve` and `dev` apply and the infer function does not (docs/from-triton.md):
    said where the version is recorded, so a deployed stack's configWarnings name them."""
    warnings = []
    if any("rate_limiter" in group for group in document.get("instance_group") or []):
        warnings.append(
            "instance_group rate_limiter is applied by `serve` and `dev` under --rate-limit "
            "execution_count (server mode: ServerModeRateLimit), not by the infer function: "
            "each Lambda execution environment runs one execution at a time, and a stated "
            "instance_group count bounds them across the fleet"
        )
    sequences = document.get("sequence_batching")
    if sequences is not None and document.get("backend") == "python" and not sequences.get("state"):
        warnings.append(
            "sequence_batching without implicit state: `serve` and `dev` keep a sequence on the "
            "instance it started on, so state the model keeps in its own memory is right there; "
            "the infer function's execution environments and `serve --workers N` processes "
            "each have their own memory, and a sequence's steps may reach several. Keep the "
            "state in sequence_batching state (implicit state), which is exact everywhere"
        )
    if (document.get("dynamic_batching") or {}).get("priority_levels"):
        warnings.append(
            "dynamic_batching priority_levels orders requests in `serve` and `dev`, and queued "
            "work by its level's queue (PriorityQueues); the infer function's synchronous "
            "requests each run in their own execution environment, in no priority order"
        )
    return warnings
