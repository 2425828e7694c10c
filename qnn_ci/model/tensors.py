"""What a model's graph inputs and outputs are, as plain records: no onnx, no numpy.

Read from a model by ``qnn_ci.model.onnx_io``; remembered across runs by
``qnn_ci.model.signature``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Dim = int | str | None   # int: static (may be -1), str: dim_param, None: unknown
SigDims = tuple[int | None, ...] | None


@dataclass(frozen=True)
class TensorIO:
    """A graph input or output: name, dtype and dims (symbolic dims as names)."""

    name: str
    dtype: str                     # numpy dtype name, "?" when undefined
    dims: tuple[Dim, ...] | None   # None: no shape at all

    @property
    def static_shape(self) -> tuple[int, ...] | None:
        if self.dims is None or not all(isinstance(d, int) and d > 0 for d in self.dims):
            return None
        return tuple(int(d) for d in self.dims)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ModelSignature:
    """A model's graph inputs {name: (dims, dtype)} (dims: int, or None when not a
    fixed value) and output names, read without its weights."""

    inputs: dict[str, tuple[SigDims, str]]
    outputs: tuple[str, ...]
    external_data: tuple[str, ...] = ()      # external weight files, relative to the model

    def to_json(self) -> dict[str, Any]:
        return {"inputs": [[n, None if d is None else list(d), t]
                           for n, (d, t) in self.inputs.items()],
                "outputs": list(self.outputs), "external_data": list(self.external_data)}

    @classmethod
    def from_json(cls, value: Any) -> ModelSignature | None:
        """The signature ``to_json`` wrote, or None for anything else."""
        if not isinstance(value, dict) or set(value) != {"inputs", "outputs", "external_data"}:
            return None
        inputs: dict[str, tuple[SigDims, str]] = {}
        raw_inputs, outputs, ext = value["inputs"], value["outputs"], value["external_data"]
        if not (isinstance(raw_inputs, list) and isinstance(outputs, list)
                and isinstance(ext, list)):
            return None
        for item in raw_inputs:
            if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)
                    and isinstance(item[2], str) and item[0] not in inputs):
                return None
            dims = item[1]
            if dims is not None and not (isinstance(dims, list) and all(
                    d is None or (type(d) is int and d > 0) for d in dims)):
                return None
            inputs[item[0]] = (None if dims is None else tuple(dims), item[2])
        if not all(isinstance(o, str) for o in outputs) \
                or not all(isinstance(e, str) for e in ext):
            return None
        return cls(inputs, tuple(outputs), tuple(ext))
