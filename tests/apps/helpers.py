"""Assertions shared by the API tests."""

from __future__ import annotations

from typing import Any


def error_fields(response: Any) -> dict[str, str]:
    """``{field: reason}`` from the API's error shape, asserting the shape on the way."""
    body = response.json()
    assert set(body) == {"errors"}, body
    assert body["errors"], body
    for error in body["errors"]:
        assert set(error) == {"field", "reason"}, error
        assert error["field"] and error["reason"], error
    return {error["field"]: error["reason"] for error in body["errors"]}
