"""Typed experience records (artos §4.2: "data specifications can be configured by developers").

A schema names each data key with the shape of one step and its dtype. Writes are batches of
steps per key: numpy arrays or torch tensors of shape ``(T, *shape)``, or, for a token field
(shape ``(None,)``), ``T`` token sequences of at most ``max_len`` tokens, stored padded with
their lengths beside them. Anything else is rejected with ``SchemaError`` naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

LENGTH_SUFFIX = ".length"


class SchemaError(ValueError):
    """A record or a schema that does not fit; the message starts with the field's name."""


@dataclass(frozen=True)
class FieldSpec:
    """One data key: per-step ``shape`` (``(None,)`` for token sequences) and ``dtype``."""

    shape: tuple[int | None, ...]
    dtype: str
    max_len: int | None = None  # token fields only: the most tokens per step

    @property
    def is_tokens(self) -> bool:
        return self.shape == (None,)

    @property
    def stored_shape(self) -> tuple[int, ...]:
        if self.is_tokens:
            assert self.max_len is not None
            return (self.max_len,)
        return tuple(int(d) for d in self.shape if d is not None)

    def to_json(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "dtype": self.dtype, "max_len": self.max_len}


def tokens(max_len: int, dtype: str = "int32") -> FieldSpec:
    """A token-sequence field: each step is up to ``max_len`` token ids."""
    return FieldSpec((None,), dtype, max_len)


def _to_numpy(value: Any) -> Any:
    """Torch tensors become numpy arrays (on CPU) without importing torch here."""
    if hasattr(value, "detach") and hasattr(value, "cpu") and hasattr(value, "numpy"):
        return value.detach().cpu().numpy()
    return value


class Schema:
    """The data keys of one buffer and how each step of each key looks."""

    def __init__(self, fields: Mapping[str, FieldSpec | Mapping[str, Any]]) -> None:
        if not fields:
            raise SchemaError("fields: a schema needs at least one data key")
        self.fields: dict[str, FieldSpec] = {}
        for name, spec in fields.items():
            self.fields[name] = self._check_spec(name, spec)

    @staticmethod
    def _check_spec(name: str, spec: FieldSpec | Mapping[str, Any]) -> FieldSpec:
        if not isinstance(name, str) or not name or LENGTH_SUFFIX in name:
            raise SchemaError(f"fields: invalid key name {name!r}")
        if not isinstance(spec, FieldSpec):
            try:
                spec = FieldSpec(tuple(spec["shape"]), str(spec["dtype"]), spec.get("max_len"))
            except (KeyError, TypeError) as error:
                raise SchemaError(f"{name}: expected shape and dtype, got {spec!r}") from error
        try:
            np.dtype(spec.dtype)
        except TypeError as error:
            raise SchemaError(f"{name}: unknown dtype {spec.dtype!r}") from error
        if spec.is_tokens:
            if not isinstance(spec.max_len, int) or spec.max_len < 1:
                raise SchemaError(f"{name}: a token field needs max_len >= 1")
            if not np.issubdtype(np.dtype(spec.dtype), np.integer):
                raise SchemaError(f"{name}: token ids need an integer dtype, got {spec.dtype}")
        elif not all(isinstance(d, int) and d >= 1 for d in spec.shape):
            raise SchemaError(f"{name}: shape {spec.shape!r} must be positive integers")
        return spec

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(self.fields)

    def to_json(self) -> dict[str, Any]:
        return {name: spec.to_json() for name, spec in self.fields.items()}

    def validate(self, batch: Mapping[str, Any]) -> tuple[int, dict[str, npt.NDArray[Any]]]:
        """Check a batch of steps (any subset of keys, all with the same step count T).

        Returns ``(T, arrays)``; a token field also yields ``key + ".length"``. No casting:
        a float64 array for a float32 field is an error, since it usually is a bug upstream.
        """
        if not batch:
            raise SchemaError("batch: no data keys given")
        arrays: dict[str, npt.NDArray[Any]] = {}
        steps: int | None = None
        for name, value in batch.items():
            if name.endswith(LENGTH_SUFFIX) and name.removesuffix(LENGTH_SUFFIX) in batch:
                continue  # checked with its token field (the padded form, as stored)
            spec = self.fields.get(name)
            if spec is None:
                raise SchemaError(f"{name}: not a key of this buffer ({', '.join(self.keys)})")
            if spec.is_tokens and name + LENGTH_SUFFIX in batch:
                padded, lengths = self._padded_tokens(
                    name, spec, value, batch[name + LENGTH_SUFFIX]
                )
                arrays[name], arrays[name + LENGTH_SUFFIX] = padded, lengths
                count = len(lengths)
            elif spec.is_tokens:
                padded, lengths = self._tokens(name, spec, value)
                arrays[name], arrays[name + LENGTH_SUFFIX] = padded, lengths
                count = len(lengths)
            else:
                array = _to_numpy(value)
                if not isinstance(array, np.ndarray):
                    raise SchemaError(
                        f"{name}: expected a numpy array or torch tensor, "
                        f"got {type(value).__name__}"
                    )
                if array.dtype != np.dtype(spec.dtype):
                    raise SchemaError(f"{name}: dtype {array.dtype} != schema {spec.dtype}")
                if array.ndim != len(spec.shape) + 1 or array.shape[1:] != spec.shape:
                    raise SchemaError(
                        f"{name}: shape {array.shape} != (steps, *{spec.shape}) from the schema"
                    )
                arrays[name] = np.ascontiguousarray(array)
                count = array.shape[0]
            if steps is None:
                steps = count
            elif count != steps:
                raise SchemaError(f"{name}: {count} steps, but other keys have {steps}")
        assert steps is not None
        if steps == 0:
            raise SchemaError(f"{next(iter(batch))}: a batch needs at least one step")
        return steps, arrays

    @staticmethod
    def _padded_tokens(
        name: str, spec: FieldSpec, value: Any, lengths: Any
    ) -> tuple[npt.NDArray[Any], npt.NDArray[np.int32]]:
        """Token ids already padded to ``max_len``, with their lengths (the stored form)."""
        padded, length_array = _to_numpy(value), _to_numpy(lengths)
        if not isinstance(padded, np.ndarray) or padded.dtype != np.dtype(spec.dtype):
            raise SchemaError(f"{name}: padded token ids must be a {spec.dtype} array")
        if padded.ndim != 2 or padded.shape[1] != spec.max_len:
            raise SchemaError(f"{name}: shape {padded.shape} != (steps, {spec.max_len})")
        if not isinstance(length_array, np.ndarray) or length_array.dtype != np.int32:
            raise SchemaError(f"{name}{LENGTH_SUFFIX}: expected an int32 array")
        if length_array.shape != (padded.shape[0],):
            raise SchemaError(f"{name}{LENGTH_SUFFIX}: one length per step expected")
        if length_array.size and (length_array.min() < 0 or length_array.max() > spec.max_len):
            raise SchemaError(f"{name}{LENGTH_SUFFIX}: lengths outside 0..{spec.max_len}")
        return np.ascontiguousarray(padded), np.ascontiguousarray(length_array)

    @staticmethod
    def _tokens(
        name: str, spec: FieldSpec, value: Any
    ) -> tuple[npt.NDArray[Any], npt.NDArray[np.int32]]:
        if isinstance(value, str | bytes) or not isinstance(value, Sequence | np.ndarray):
            raise SchemaError(f"{name}: expected a sequence of token sequences")
        assert spec.max_len is not None
        dtype = np.dtype(spec.dtype)
        padded = np.zeros((len(value), spec.max_len), dtype=dtype)
        lengths = np.zeros(len(value), dtype=np.int32)
        for row, sequence in enumerate(value):
            ids = np.asarray(_to_numpy(sequence))
            if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
                raise SchemaError(f"{name}: step {row} is not a 1-D sequence of integer ids")
            if ids.size > spec.max_len:
                raise SchemaError(f"{name}: step {row} has {ids.size} tokens > {spec.max_len}")
            if ids.size and (ids.min() < np.iinfo(dtype).min or ids.max() > np.iinfo(dtype).max):
                raise SchemaError(f"{name}: step {row} has ids outside {dtype}")
            padded[row, : ids.size] = ids
            lengths[row] = ids.size
        return padded, lengths

    def stored_fields(self) -> dict[str, tuple[tuple[int, ...], np.dtype[Any]]]:
        """Every array the buffer keeps per step: the keys and token fields' lengths."""
        out: dict[str, tuple[tuple[int, ...], np.dtype[Any]]] = {}
        for name, spec in self.fields.items():
            out[name] = (spec.stored_shape, np.dtype(spec.dtype))
            if spec.is_tokens:
                out[name + LENGTH_SUFFIX] = ((), np.dtype(np.int32))
        return out
