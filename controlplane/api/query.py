"""Which query parameters a REST operation accepts, so an unknown one is a 400 naming it.

A misspelt filter (``?stauts=failed``) would otherwise be ignored and answer with the unfiltered
list, which looks like a right answer. An operation accepts:

- ``format`` (DRF's content negotiation, on every endpoint);
- on a paginated list: the paginator's ``cursor`` and ``page_size``;
- the fields of the serializer that parses its query string: a list's ``FilterSerializer``
  (``CursorListView``), or the view's ``query_serializers[METHOD]`` (``wait``,
  ``representation``) — the same serializers the OpenAPI schema documents.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from rest_framework import generics, serializers
from rest_framework.views import APIView

FORMAT_PARAM = "format"


def accepted_query_params(
    view_cls: type[APIView], method: str, actions: Mapping[str, str] | None
) -> frozenset[str]:
    """The names ``method`` on ``view_cls`` accepts (``actions``: a viewset's method → action)."""
    key: Any = view_cls
    return _accepted(key, method.upper(), tuple(sorted((actions or {}).items())))


@functools.cache
def _accepted(view_cls: Any, method: str, actions: tuple[tuple[str, str], ...]) -> frozenset[str]:
    names = {FORMAT_PARAM}
    action = dict(actions).get(method.lower())
    is_list = action == "list" or (
        not actions and method == "GET" and issubclass(view_cls, generics.ListAPIView)
    )
    if is_list:
        paginator = getattr(view_cls, "pagination_class", None)
        for attribute in ("cursor_query_param", "page_size_query_param", "page_query_param"):
            if name := getattr(paginator, attribute, None):
                names.add(name)
        names |= _fields(getattr(view_cls, "FilterSerializer", None))
    declared: Mapping[str, Any] = getattr(view_cls, "query_serializers", {})
    names |= _fields(declared.get(method))
    return frozenset(names)


def _fields(serializer_cls: type[serializers.Serializer] | None) -> set[str]:
    return set(serializer_cls().fields) if serializer_cls is not None else set()


def unknown_query_param(
    query_names: list[str], view_cls: type[APIView], method: str, actions: Mapping[str, str] | None
) -> tuple[str, str] | None:
    """(name, reason) for the first query parameter the operation does not accept, or None."""
    accepted = accepted_query_params(view_cls, method, actions)
    for name in query_names:
        if name not in accepted:
            listed = ", ".join(sorted(accepted))
            return name, f"unknown query parameter; this operation accepts: {listed}"
    return None
