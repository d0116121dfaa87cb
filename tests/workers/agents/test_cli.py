"""The agents' command line reads the environment every other Loom process reads."""

from __future__ import annotations

import argparse

import pytest

from workers.agents.common.cli import add_common_arguments, streams_from


def _parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_common_arguments(parser)
    return parser.parse_args(["--pool", "cpu", *argv])


def test_the_stream_prefix_and_redis_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOOM_STREAM_PREFIX", "cluster-b")
    monkeypatch.setenv("REDIS_URL", "redis://10.0.0.9:6379/3")
    args = _parsed()
    assert streams_from(args).prefix == "cluster-b"
    assert args.redis_url == "redis://10.0.0.9:6379/3"
    flagged = _parsed("--stream-prefix", "other", "--redis-url", "redis://h:1/0")
    assert (flagged.stream_prefix, flagged.redis_url) == ("other", "redis://h:1/0")


def test_without_the_environment_the_defaults_stay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOOM_STREAM_PREFIX", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)
    args = _parsed()
    assert (args.stream_prefix, args.redis_url) == ("loom", "redis://127.0.0.1:6379/0")
