"""``pb_utils.ModelConfig``: what a Python model's ``auto_complete_config`` is handed, with
Triton's rules (python_backend's ``triton_python_backend_utils.ModelConfig``): tensors added
only where the config has none of that name or agrees with it, ``max_batch_size`` never
lowered below the config's, a dynamic batcher only where no other scheduler is set,
``decoupled`` never flipped."""

from __future__ import annotations

import json
from typing import Any

_INPUT_PROPERTIES = ("name", "data_type", "dims", "optional")
_OUTPUT_PROPERTIES = ("name", "data_type", "dims")


class ModelConfig:
    def __init__(self, model_config: str | dict[str, Any]) -> None:
        document = json.loads(model_config) if isinstance(model_config, str) else model_config
        self._model_config: dict[str, Any] = dict(document)
        self._model_config.setdefault("input", [])
        self._model_config.setdefault("output", [])
        self._model_config.setdefault("max_batch_size", 0)

    @property
    def _name(self) -> str:
        return str(self._model_config.get("name", ""))

    def as_dict(self) -> dict[str, Any]:
        return self._model_config

    def set_max_batch_size(self, max_batch_size: int) -> None:
        if self._model_config["max_batch_size"] > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {self._model_config['max_batch_size']}"
                f", but in auto-complete-config function for model '{self._name}' specified "
                f"max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        for scheduler in ("sequence_batching", "ensemble_scheduling"):
            if scheduler in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{scheduler}', but "
                    f"auto-complete-config function for model '{self._name}' tries to set "
                    "scheduling_choice as 'dynamic_batching'"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def add_input(self, input: dict[str, Any]) -> None:
        self._add("input", input, _INPUT_PROPERTIES)

    def add_output(self, output: dict[str, Any]) -> None:
        self._add("output", output, _OUTPUT_PROPERTIES)

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        if set(transaction_policy_dict) - {"decoupled"}:
            raise ValueError(
                "model transaction property in auto-complete-config function for model "
                f"'{self._name}' contains property other than 'decoupled'."
            )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            wanted = transaction_policy_dict["decoupled"]
            if "decoupled" in policy and policy["decoupled"] != wanted:
                raise ValueError(
                    f"trying to change decoupled property in auto-complete-config for model "
                    f"'{self._name}', which is already set to '{policy['decoupled']}'."
                )
            policy["decoupled"] = wanted

    def _add(self, role: str, tensor: dict[str, Any], properties: tuple[str, ...]) -> None:
        name = tensor.get("name", "")
        extra = set(tensor) - set(properties)
        if extra:
            allowed = ", ".join(f"'{p}'" for p in properties)
            raise ValueError(
                f"{role} '{name}' in auto-complete-config function for model '{self._name}' "
                f"contains property other than {allowed}."
            )
        for required in ("name", "data_type", "dims"):
            if required not in tensor:
                raise ValueError(
                    f"{role} '{name}' in auto-complete-config function for model "
                    f"'{self._name}' is missing '{required}' property."
                )
        for current in self._model_config[role]:
            if current["name"] != name:
                continue
            declared = current.get("data_type", "TYPE_INVALID")
            if declared != "TYPE_INVALID" and declared != tensor["data_type"]:
                raise ValueError(
                    f"unable to load model '{self._name}', configuration expects datatype "
                    f"{declared} for {role} '{name}', model provides {tensor['data_type']}"
                )
            dims = [int(d) for d in current.get("dims", [])]
            if dims and dims != [int(d) for d in tensor["dims"]]:
                raise ValueError(
                    f"model '{self._name}', tensor '{name}': the model expects dims "
                    f"{tensor['dims']} but the model configuration specifies dims {dims}"
                )
            current.update(tensor)
            return
        self._model_config[role].append(dict(tensor))
