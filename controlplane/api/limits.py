"""What a JSON request body may be: one function, ``parse_json_body``, for every parse path.

The DRF parser (``controlplane.api.parsers``), the HTTP bridge's early size check
(``controlplane.http_bridge``) and the dashboard's websocket all refuse the same bodies, with
the same reasons, so no path accepts what another refuses — and nothing reaches a view, the
database or the renderer that would fail there (a 500):

- size: at most ``settings.LOOM_MAX_BODY_BYTES`` bytes;
- encoding: UTF-8 (RFC 8259 §8.1), no NUL characters or unpaired surrogates (PostgreSQL's text
  and jsonb refuse both);
- depth: at most ``settings.LOOM_MAX_JSON_DEPTH`` nested arrays/objects (Python's parser and
  renderer recurse; far below their limit, so a deep body is a 400, never a RecursionError);
- numbers: integers within int64 (what a bigint column holds and what every client can parse),
  floats finite (``1e400``, ``NaN`` and ``Infinity`` cannot be rendered back as JSON).

A refusal names where it is: ``body`` for the whole, else the value's path from the root
(``items[3].payload.seed``), in the error shape's own notation.
"""

from __future__ import annotations

import json
import math
from typing import Any

from django.conf import settings

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
BODY = "body"


class JsonRejected(ValueError):
    """A body (or one value in it) that Loom refuses; ``field`` says where, ``reason`` why."""

    def __init__(self, *, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def max_body_bytes() -> int:
    return int(settings.LOOM_MAX_BODY_BYTES)


def max_depth() -> int:
    return int(settings.LOOM_MAX_JSON_DEPTH)


def too_large(size: int) -> JsonRejected | None:
    """The refusal for a body of ``size`` bytes, or None if that size is allowed."""
    limit = max_body_bytes()
    if size <= limit:
        return None
    return JsonRejected(field=BODY, reason=f"larger than the limit of {limit} bytes")


def parse_json_body(raw: bytes | str) -> Any:
    """The JSON value of ``raw``, or ``JsonRejected`` naming the limit it breaks."""
    size = len(raw.encode("utf-8", "surrogatepass")) if isinstance(raw, str) else len(raw)
    if (refusal := too_large(size)) is not None:
        raise refusal
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise JsonRejected(
                field=BODY, reason=f"not valid UTF-8 (byte {error.start}): JSON must be UTF-8"
            ) from None
    else:
        text = raw
    try:
        data = json.loads(text)
    except RecursionError:
        raise JsonRejected(field=BODY, reason=_depth_reason()) from None
    except ValueError as error:  # JSONDecodeError; an integer of more digits than Python parses
        raise JsonRejected(field=BODY, reason=f"malformed JSON: {error}") from None
    check_json_value(data)
    return data


def check_json_value(data: Any, root: str = "") -> None:
    """Raise ``JsonRejected`` at the first value of ``data`` that Loom cannot store or render.

    Iterative (an explicit stack), so it can check any depth without recursing.
    """
    limit = max_depth()
    stack: list[tuple[Any, str, int]] = [(data, root, 0)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, str):
            if problem := _bad_string(value):
                raise JsonRejected(field=path or BODY, reason=problem)
        elif isinstance(value, bool) or value is None:
            continue
        elif isinstance(value, int):
            if not INT64_MIN <= value <= INT64_MAX:
                raise JsonRejected(
                    field=path or BODY,
                    reason=f"integer out of range: must be within [{INT64_MIN}, {INT64_MAX}]",
                )
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise JsonRejected(
                    field=path or BODY,
                    reason="numbers must be finite (no NaN, Infinity or overflowing values)",
                )
        elif isinstance(value, dict | list):
            if depth + 1 > limit:
                raise JsonRejected(field=BODY, reason=_depth_reason())
            if isinstance(value, dict):
                for key, item in value.items():
                    if problem := _bad_string(key):
                        raise JsonRejected(field=path or BODY, reason=f"a key: {problem}")
                    stack.append((item, _join(path, key), depth + 1))
            else:
                stack.extend(
                    (item, f"{path}[{index}]", depth + 1) for index, item in enumerate(value)
                )


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _depth_reason() -> str:
    return f"nested deeper than the limit of {max_depth()} levels of arrays and objects"


def _bad_string(value: str) -> str | None:
    if "\x00" in value:
        return "strings must not contain NUL (\\u0000) characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "strings must not contain unpaired surrogates"
    return None
