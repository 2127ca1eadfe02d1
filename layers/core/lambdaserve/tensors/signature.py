"""What a model takes and gives: named tensors with v2 datatypes, and a model's signature."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

# Tensors by name, as runtimes take and give them.
Arrays = dict[str, "np.ndarray[Any, Any]"]


@dataclass(frozen=True)
class TensorSpec:
    """A named tensor with a v2 datatype; -1 marks a dynamic dimension."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    # Triton's input.optional: a request may leave it out, and the model then gets no tensor
    optional: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


@dataclass(frozen=True)
class Signature:
    """Inputs and outputs of a model, in v2 datatypes; -1 marks a dynamic dimension."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    # the runtime checks the inputs' shapes itself (TensorFlow: TF Serving hands a tensor to
    # the graph as sent, and half_plus_two's x [-1, 1] takes [2.0]); binding checks the rest
    runtime_checks_shapes: bool = False

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "inputs": [t.to_json() for t in self.inputs],
            "outputs": [t.to_json() for t in self.outputs],
        }
        if self.runtime_checks_shapes:
            document["runtime_checks_shapes"] = True
        return document

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Signature:
        def specs(items: Sequence[dict[str, object]]) -> tuple[TensorSpec, ...]:
            return tuple(
                TensorSpec(
                    str(i["name"]),
                    str(i["datatype"]),
                    tuple(int(d) for d in i["shape"]),  # type: ignore[attr-defined]
                )
                for i in items
            )

        return cls(
            specs(data.get("inputs", [])),
            specs(data.get("outputs", [])),
            bool(data.get("runtime_checks_shapes", False)),
        )

    def with_optional(self, names: Sequence[str]) -> Signature:
        """This signature with the inputs ``names`` optional (a config's input.optional)."""
        if not names:
            return self
        inputs = tuple(
            replace(spec, optional=True) if spec.name in names else spec for spec in self.inputs
        )
        return replace(self, inputs=inputs)


@dataclass(frozen=True)
class SignatureDef:
    """One named signature of a model that has several (a SavedModel's): its method name
    (``tensorflow/serving/predict``...), its tensors, and what TF Serving's metadata says of
    them besides: each tensor key's graph tensor (``x:0``) and the keys of unknown rank."""

    method: str
    signature: Signature
    tensor_names: Mapping[str, str] = field(default_factory=dict)
    unknown_rank: frozenset[str] = frozenset()
