"""A JSON parser that refuses what the database would refuse later (and turn into a 500).

PostgreSQL's jsonb and text reject NUL characters and unpaired surrogates; ``1e400`` parses to
infinity, which JSON cannot carry back out. All become a 400 naming the body here.
"""

from __future__ import annotations

import math
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


def _bad_string(value: str) -> str | None:
    if "\x00" in value:
        return "strings must not contain NUL (\\u0000) characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "strings must not contain unpaired surrogates"
    return None


def check_json_value(data: Any) -> None:
    """Raise ParseError if ``data`` holds a value that cannot be stored or rendered as JSON."""
    stack = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            if problem := _bad_string(value):
                raise ParseError(problem)
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise ParseError("numbers must be finite (got an overflowing value)")
        elif isinstance(value, dict):
            for key, item in value.items():
                if problem := _bad_string(key):
                    raise ParseError(problem)
                stack.append(item)
        elif isinstance(value, list):
            stack.extend(value)


class StrictJSONParser(JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        data = super().parse(stream, media_type, parser_context)
        check_json_value(data)
        return data
