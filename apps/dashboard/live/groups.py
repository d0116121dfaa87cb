"""Names of the live-data groups a dashboard client can subscribe to.

Clients speak in topics such as ``pool:cpu``, ``node:17`` and ``job:3`` (STYLE.md item 7, after
AWX's multiplexed consumer). Channel layers only accept ``[A-Za-z0-9._-]`` group names shorter than
100 characters, so every topic maps to one layer group name here and nowhere else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class TopicKind(StrEnum):
    """The kinds of object a client may watch live."""

    POOL = "pool"
    NODE = "node"
    JOB = "job"
    GPUS = "gpus"  # a GPU pool's map: ``gpus:<pool>``
    BUFFER = "buffer"  # ``buffer:<id>``
    ROLLOUTS = "rollouts"  # ``rollouts:all`` or one job's, ``rollouts:<job id>``


ALL_JOBS = "all"


_POOL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_NUMERIC_ID = re.compile(r"^[1-9][0-9]{0,17}$")


class InvalidTopic(ValueError):
    """A topic string that names no watchable object."""


@dataclass(frozen=True, slots=True)
class Topic:
    """One parsed subscription topic, e.g. ``Topic(TopicKind.POOL, "cpu")``."""

    kind: TopicKind
    key: str

    def __str__(self) -> str:
        return f"{self.kind.value}:{self.key}"

    @property
    def layer_group(self) -> str:
        """The channel-layer group name for this topic (``loom.pool.cpu``)."""
        return f"loom.{self.kind.value}.{self.key}"

    @property
    def numeric_id(self) -> int:
        """The integer id of a node or job topic."""
        return int(self.key)


def topic_parse(raw: object) -> Topic:
    """Parse ``"pool:<name>" | "node:<id>" | "job:<id>"`` and the data-plane pages' topics
    (``gpus:<pool>``, ``buffer:<id>``, ``rollouts:all|<job id>``); raise InvalidTopic with the
    reason."""
    if not isinstance(raw, str):
        raise InvalidTopic("group must be a string like 'pool:<name>'")
    kind_text, sep, key = raw.partition(":")
    if not sep:
        raise InvalidTopic(f"group {raw!r} must look like 'pool:<name>', 'node:<id>' or 'job:<id>'")
    try:
        kind = TopicKind(kind_text)
    except ValueError:
        kinds = ", ".join(k.value for k in TopicKind)
        raise InvalidTopic(f"unknown group kind {kind_text!r}; expected one of {kinds}") from None
    if kind in (TopicKind.POOL, TopicKind.GPUS):
        if not _POOL_NAME.match(key):
            raise InvalidTopic(f"pool name {key!r} is not a valid pool name")
    elif kind is TopicKind.ROLLOUTS and key == ALL_JOBS:
        pass
    elif not _NUMERIC_ID.match(key):
        raise InvalidTopic(f"{kind.value} id {key!r} must be a positive integer")
    return Topic(kind, key)
