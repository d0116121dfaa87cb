"""Experience records between JSON and the data plane's typed arrays (artos §4.2 schemas).

A REST client sends each data key as nested lists, one entry per step (token fields: one list of
ids per step). Values are cast to the key's dtype only where nothing is lost: integers for an
integer key (in its range), integers or floats for a float key, booleans for a bool key; then
``Schema.validate`` checks shapes and step counts. Every refusal names ``records.<key>``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from workers.buffers.schema import LENGTH_SUFFIX, Schema, SchemaError

Arrays = dict[str, npt.NDArray[Any]]
ACCEPTED_KINDS = {"b": "b", "i": "iub", "u": "iub", "f": "iubf"}


class RecordError(ValueError):
    """A record that does not fit its buffer's schema; ``field`` names the key."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field, self.reason = field, reason


def _array(key: str, dtype: np.dtype[Any], value: Any) -> npt.NDArray[Any]:
    field = f"records.{key}"
    if not isinstance(value, list):
        raise RecordError(field, "expected a list with one entry per step")
    try:
        array = np.array(value)
    except ValueError as error:
        raise RecordError(field, f"steps of different shapes ({error})") from None
    if array.dtype.kind not in "biuf" and array.size:
        raise RecordError(field, f"expected numbers for dtype {dtype.name}")
    if array.size and array.dtype.kind not in ACCEPTED_KINDS[dtype.kind]:
        raise RecordError(field, f"values of kind {array.dtype.name} do not fit {dtype.name}")
    if array.size and dtype.kind in "iu" and array.dtype.kind != "b":
        info = np.iinfo(dtype)
        if array.min() < info.min or array.max() > info.max:
            raise RecordError(field, f"values outside the range of {dtype.name}")
    if array.size and dtype.kind == "f" and not np.all(np.isfinite(array.astype(np.float64))):
        raise RecordError(field, "values must be finite numbers")
    return array.astype(dtype)


def records_from_json(schema: Schema, records: Any) -> tuple[int, Arrays]:
    """``(steps, arrays)`` from a push's ``records``, checked as the buffer service checks them."""
    if not isinstance(records, Mapping) or not records:
        raise RecordError("records", "expected an object mapping data keys to lists of steps")
    converted: dict[str, Any] = {}
    for key, value in records.items():
        spec = schema.fields.get(key)
        if spec is None:
            raise RecordError(
                f"records.{key}", f"not a key of this buffer ({', '.join(schema.keys)})"
            )
        converted[key] = value if spec.is_tokens else _array(key, np.dtype(spec.dtype), value)
    try:
        return schema.validate(converted)
    except SchemaError as error:
        field, _, reason = str(error).partition(": ")
        raise RecordError(f"records.{field}", reason) from None


def stored_keys(schema: Schema, keys: Iterable[str], field: str = "keys") -> list[str]:
    """The stored arrays behind the asked-for keys (a token field brings its lengths); all of
    them when none is asked for."""
    names = list(keys)
    out: list[str] = []
    for index, key in enumerate(names):
        spec = schema.fields.get(key)
        if spec is None:
            raise RecordError(f"{field}[{index}]", f"{key!r} is not a key of this buffer")
        out += [key, key + LENGTH_SUFFIX] if spec.is_tokens else [key]
    return out


def arrays_to_json(arrays: Mapping[str, npt.NDArray[Any]]) -> dict[str, Any]:
    """Arrays as nested lists; a token field as its sequences, each cut to its length."""
    out: dict[str, Any] = {}
    for key, array in arrays.items():
        if key.endswith(LENGTH_SUFFIX):
            continue
        lengths = arrays.get(key + LENGTH_SUFFIX)
        if lengths is not None:
            out[key] = [row[:length].tolist() for row, length in zip(array, lengths, strict=True)]
        else:
            out[key] = array.tolist()
    return out
