"""The JSON parser of every REST endpoint: the body limits of ``controlplane.api.limits``.

DRF's own parser would let a deeply nested body raise RecursionError (a 500), accept any size,
NaN and ``1e400``, and report invalid UTF-8 as a decoding detail; this one reads at most one
byte past the size limit and leaves every judgement to ``parse_json_body``.
"""

from __future__ import annotations

from typing import Any

from rest_framework.parsers import JSONParser

from controlplane.api.errors import ApiError
from controlplane.api.limits import JsonRejected, max_body_bytes, parse_json_body


class StrictJSONParser(JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        # JSON is UTF-8 whatever the Content-Type's charset says (RFC 8259 §8.1).
        raw = stream.read(max_body_bytes() + 1) if stream is not None else b""
        try:
            return parse_json_body(raw)
        except JsonRejected as error:
            raise ApiError(field=error.field, reason=error.reason) from None
