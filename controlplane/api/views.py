"""Small helpers for thin API views."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from rest_framework import generics, serializers

from controlplane.api.pagination import IdCursorPagination


class CursorListView(generics.ListAPIView):
    """A list endpoint: cursor-paginated OutputSerializer over ``get_queryset()``.

    Query parameters are parsed by ``FilterSerializer`` (if set) so a bad filter is a 400 naming
    the parameter, not an empty page.
    """

    pagination_class = IdCursorPagination
    FilterSerializer: type[serializers.Serializer] | None = None

    def filters(self) -> dict[str, Any]:
        if self.FilterSerializer is None:
            return {}
        if not hasattr(self, "_filters"):
            serializer = self.FilterSerializer(data=self.request.query_params)
            serializer.is_valid(raise_exception=True)
            self._filters: dict[str, Any] = dict(serializer.validated_data)
        return self._filters

    def get_queryset(self) -> QuerySet[Any]:
        raise NotImplementedError
