"""Loom's Python SDK: ``loom.Client`` and ``loom.AsyncClient``."""

from loom.aio import AsyncClient
from loom.client import Client
from loom.errors import (
    ApiError,
    AuthenticationError,
    LoomError,
    NotFoundError,
    ResultTimeout,
    TransientError,
)
from loom.protocol import RetryPolicy
from loom.types import Action, Timings

__all__ = [
    "Action",
    "ApiError",
    "AsyncClient",
    "AuthenticationError",
    "Client",
    "LoomError",
    "NotFoundError",
    "ResultTimeout",
    "RetryPolicy",
    "Timings",
    "TransientError",
]
