"""Integer and bool graph inputs, verified from what the converter produced.

A token id, index or mask input must stay an integer (or bool) tensor: the
converter quantizes it like an activation (``UFIXED_POINT_16``) unless told not
to, and the model converts fine but computes garbage. The flags that keep it
(``--input_dtype NAME int32``, ``--input_encoding NAME other``) are not enough
evidence: a real 2.18 run quantized an input despite ``other`` because AIMET
overrides named it. So this module checks the outcome: the input's data type in
the generated source and in ``_net.json`` must be an integer/bool QNN type
(``qnn_ci.tables.is_integer_qnn_datatype``; an int64 input may become INT_32).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qnn_ci.sdk.cpp_model import CppModel
from qnn_ci.sdk.net_json import NetJson
from qnn_ci.sdk.record import ConverterRecord
from qnn_ci.tables import is_integer_qnn_datatype

log = logging.getLogger(__name__)


def converter_name(name: str) -> str:
    """The tensor name the converter writes for an ONNX name: runs of non-word
    characters become ``_``, a leading digit gets a ``_`` (``73`` -> ``_73``)."""
    out = re.sub(r"\W+", "_", name)
    return "_" + out if out[:1].isdigit() else out


@dataclass(frozen=True)
class QuantizedInput:
    """An integer/bool graph input the converter did not keep integer."""

    input: str
    dtype: str                 # the model's dtype ("int64")
    file: str                  # the converter output it was read from
    data_type: str             # the QNN data type recorded there
    flags: str                 # the flags that keep it, as they should be passed
    recorded: str              # what the record says was passed for it ("" when nothing)
    cause: str | None = None   # e.g. "AIMET overrides name it"

    def message(self) -> str:
        why = f"; {self.cause}" if self.cause else ""
        got = (f"despite {self.recorded}" if self.recorded else
               f"the record shows neither flag; pass {self.flags}")
        return (f"integer input {self.input} ({self.dtype}) is {self.data_type} in "
                f"{Path(self.file).name}, not an integer type: the converter quantized it "
                f"({got}){why}")


def recorded_flags(rec: ConverterRecord | None, name: str) -> list[str]:
    """The ``--input_dtype`` / ``--input_encoding`` entries the record holds for ``name``."""
    if rec is None:
        return []
    out: list[str] = []
    for key in ("input_dtype", "input_encoding"):
        value = rec.value(key)
        if not isinstance(value, list | tuple):
            continue
        for entry in value:
            if isinstance(entry, list | tuple) and entry and str(entry[0]) == name:
                out.append(f"--{key} " + " ".join(str(e) for e in entry))
    return out


def keeping_flags(name: str, dtype: str, rec: ConverterRecord | None) -> str:
    """The flags that keep ``name`` integer; ``--input_dtype`` only where the SDK has it
    (its record lists ``input_dtype``, or no record says otherwise)."""
    encoding = f"--input_encoding {name} other"
    if rec is not None and not rec.has("input_dtype"):
        return encoding
    return f"--input_dtype {name} {dtype} and {encoding}"


def _lookup(types: Mapping[str, str | None], name: str) -> tuple[bool, str | None]:
    for candidate in (name, converter_name(name)):
        if candidate in types:
            return True, types[candidate]
    return False, None


def check_outputs(int_inputs: Mapping[str, str], outputs: Iterable[CppModel | NetJson], *,
                  record: ConverterRecord | None = None,
                  overridden: Iterable[str] = ()) -> list[QuantizedInput]:
    """Every integer input (name -> model dtype) that some converter output does not
    keep integer. ``overridden``: input names an AIMET overrides file names."""
    named = set(overridden)
    found: list[QuantizedInput] = []
    for out in outputs:
        types, flagged = _types(out)
        for name, dtype in int_inputs.items():
            present, data_type = _lookup(types, name)
            if not present:
                log.info("%s: graph input %s not found", out.source, name)
                continue
            if data_type is not None and is_integer_qnn_datatype(data_type):
                continue
            cause = None
            if name in named or converter_name(name) in flagged or name in flagged:
                cause = ("AIMET overrides name it (--quantization_overrides), which quantizes "
                         "it whatever --input_encoding says: remove its entry from the "
                         "encodings file")
            found.append(QuantizedInput(
                name, dtype, out.source, data_type or "an unreadable data type",
                keeping_flags(name, dtype, record),
                " and ".join(recorded_flags(record, name)), cause))
    return found


def _types(out: CppModel | NetJson) -> tuple[dict[str, str | None], set[str]]:
    """(tensor name -> QNN data type name, names marked as overridden)."""
    if isinstance(out, NetJson):
        types: dict[str, str | None] = {}
        for t in out.tensors:
            types.setdefault(t.name, t.data_type or (
                f"code {t.data_type_code}" if t.data_type_code is not None else None))
        return types, {t.name for t in out.tensors if t.quant.get("is_overridden") is True}
    return {t.name: t.data_type for t in out.tensors}, set()


def overrides_names(path: Path | None) -> set[str]:
    """Tensor names in an AIMET overrides file; empty when it cannot be read (the
    encodings stage reports that file on its own)."""
    if path is None:
        return set()
    from qnn_ci.errors import UserError
    from qnn_ci.sdk.encodings import read_encodings

    try:
        return read_encodings(path).names()
    except (UserError, OSError) as exc:
        log.info("overrides %s not read: %s", path, exc)
        return set()


def integer_inputs_of(model: Any) -> dict[str, str]:
    """Integer/bool graph inputs (name -> numpy dtype name) of an ONNX ``ModelProto``
    (initializers that are also listed as inputs are not inputs)."""
    import onnx

    from qnn_ci.tables import is_integer_input_dtype

    inits = {i.name for i in model.graph.initializer}
    out: dict[str, str] = {}
    for vi in model.graph.input:
        et = vi.type.tensor_type.elem_type
        if vi.name in inits or not et:
            continue
        try:
            dtype = onnx.helper.tensor_dtype_to_np_dtype(et).name
        except (KeyError, ValueError, TypeError):
            continue
        if is_integer_input_dtype(dtype):
            out[vi.name] = dtype
    return out
