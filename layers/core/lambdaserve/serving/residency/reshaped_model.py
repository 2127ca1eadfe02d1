"""A loaded model behind its config's ``reshape``s: clients' shapes in, the model's inside."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from lambdaserve.config.reshape import Reshape
from lambdaserve.errors import InferenceError
from lambdaserve.runtimes.base import LoadedModel
from lambdaserve.tensors.signature import Arrays


class ReshapedModel:
    """A loaded model behind its config's reshapes."""

    def __init__(self, model: LoadedModel, reshapes: Sequence[Reshape], batched: bool) -> None:
        self._model = model
        self._batched = batched
        self._inputs = {r.name: r for r in reshapes if r.role == "input"}
        self._outputs = {r.name: r for r in reshapes if r.role == "output"}
        self.device = model.device

    def close(self) -> None:
        close = getattr(self._model, "close", None)
        if close is not None:
            close()

    def run(self, inputs: Mapping[str, np.ndarray[Any, Any]], outputs: Sequence[str]) -> Arrays:
        fed = {
            name: self._to(value, self._inputs[name].model_shape) if name in self._inputs else value
            for name, value in inputs.items()
        }
        results = self._model.run(fed, outputs)
        return {
            name: self._to(value, self._outputs[name].client_shape)
            if name in self._outputs
            else value
            for name, value in results.items()
        }

    def _to(self, array: np.ndarray[Any, Any], shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
        target = (array.shape[0], *shape[1:]) if self._batched and array.ndim else shape
        try:
            return array.reshape(target)
        except ValueError as exc:
            raise InferenceError(
                f"cannot reshape a tensor of shape {list(array.shape)} to {list(shape)} as the "
                f"config's reshape asks: {exc}"
            ) from None
