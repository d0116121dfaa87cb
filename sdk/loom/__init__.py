"""Loom's Python SDK: ``loom.Client`` and ``loom.AsyncClient``."""

from loom.aio import AsyncClient
from loom.buffers import Buffer, Sample
from loom.client import Client
from loom.errors import (
    ApiError,
    AuthenticationError,
    LoomError,
    NotFoundError,
    ResultTimeout,
    TransientError,
)
from loom.groups import AsyncGroupRollout, GroupRollout, GroupSample, GroupTokens
from loom.protocol import RetryPolicy
from loom.trajectories import Trajectory, Turn
from loom.types import Action, Timings

__all__ = [
    "Action",
    "ApiError",
    "AsyncClient",
    "AsyncGroupRollout",
    "AuthenticationError",
    "Buffer",
    "Client",
    "GroupRollout",
    "GroupSample",
    "GroupTokens",
    "LoomError",
    "NotFoundError",
    "ResultTimeout",
    "RetryPolicy",
    "Sample",
    "Timings",
    "Trajectory",
    "TransientError",
    "Turn",
]
