"""Cursor pagination for every list endpoint: stable under inserts, O(1) per page."""

from rest_framework.pagination import CursorPagination


class IdCursorPagination(CursorPagination):
    """Newest first by primary key (monotonic with submission); ``?page_size=`` up to 1 000."""

    ordering = "-id"
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000
