"""The data plane's frames: a JSON header and one raw frame per array (ZeroMQ multipart).

Arrays travel as their bytes, not pickled or base64'd, so a receiver maps them with
``np.frombuffer`` without a copy (artos §5: ZeroMQ, chosen here by measurement over Redis).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

MAX_ARRAYS = 256


class WireError(ValueError):
    """A malformed message; the text names what is wrong."""


def encode(
    header: Mapping[str, Any], arrays: Mapping[str, npt.NDArray[Any]] | None = None
) -> list[Any]:
    arrays = arrays or {}
    layout = []
    frames: list[Any] = []
    for name, array in arrays.items():
        contiguous = np.ascontiguousarray(array)
        layout.append([name, contiguous.dtype.str, list(contiguous.shape)])
        frames.append(contiguous.data if contiguous.size else b"")
    return [json.dumps({**header, "arrays": layout}).encode(), *frames]


def decode(frames: Sequence[Any]) -> tuple[dict[str, Any], dict[str, npt.NDArray[Any]]]:
    if not frames:
        raise WireError("message: empty")
    try:
        header = json.loads(bytes(frames[0]))
        layout = header.pop("arrays")
    except (ValueError, KeyError, TypeError) as error:
        raise WireError(f"header: not a data-plane header ({error})") from error
    if not isinstance(layout, list) or len(layout) != len(frames) - 1 or len(layout) > MAX_ARRAYS:
        raise WireError(f"arrays: header lists {len(layout)} arrays, got {len(frames) - 1}")
    arrays = {}
    for (name, dtype, shape), frame in zip(layout, frames[1:], strict=True):
        buffer = frame.buffer if hasattr(frame, "buffer") else frame
        try:
            arrays[name] = np.frombuffer(buffer, dtype=np.dtype(dtype)).reshape(shape)
        except (TypeError, ValueError) as error:
            raise WireError(f"{name}: frame does not hold {dtype}{tuple(shape)}") from error
    return header, arrays
