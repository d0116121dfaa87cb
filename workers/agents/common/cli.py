"""Command-line plumbing shared by ``python -m workers.agents.cpu`` and ``...agents.api``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket

from workers.agents.common.agent import AgentBase, AgentSettings
from workers.transport.streams import StreamNames


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    # The environment the web, schedulers and router read (README "Configuration"), so one
    # LOOM_STREAM_PREFIX reaches every process; a flag still wins.
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
        help="env REDIS_URL",
    )
    parser.add_argument("--pool", required=True, help="resource pool this node serves")
    parser.add_argument("--node-id", default=socket.gethostname())
    parser.add_argument(
        "--stream-prefix",
        default=os.environ.get("LOOM_STREAM_PREFIX", "loom"),
        help="key prefix of the streams; env LOOM_STREAM_PREFIX",
    )
    parser.add_argument("--heartbeat-interval", type=float, default=2.0, help="seconds")
    parser.add_argument("--reclaim-interval", type=float, default=2.0, help="seconds")
    parser.add_argument(
        "--reclaim-idle-ms",
        type=int,
        default=15_000,
        help="take over a dead instance's pending dispatches after this idle time",
    )
    parser.add_argument("--log-level", default="INFO")


def settings_from(args: argparse.Namespace) -> AgentSettings:
    return AgentSettings(
        heartbeat_interval_s=args.heartbeat_interval,
        reclaim_interval_s=args.reclaim_interval,
        reclaim_idle_ms=args.reclaim_idle_ms,
    )


def streams_from(args: argparse.Namespace) -> StreamNames:
    return StreamNames(prefix=args.stream_prefix)


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


async def serve_until_signalled(agent: AgentBase) -> None:
    """Run the agent; SIGTERM/SIGINT stop it cleanly (running actions end ``agent_lost``)."""
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, lambda: asyncio.ensure_future(agent.stop()))
    await agent.run()
