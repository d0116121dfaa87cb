"""``python -m workers.agents.api --redis-url URL --pool NAME --node-id ID``.

Needs Redis only (no Django, no database).
"""

from __future__ import annotations

import argparse
import sys

import uvloop

from workers.agents.api.agent import ApiAgent
from workers.agents.common.cli import (
    add_common_arguments,
    configure_logging,
    serve_until_signalled,
    settings_from,
    streams_from,
)
from workers.transport.redis_streams import RedisStreamsTransport


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m workers.agents.api", description=__doc__)
    add_common_arguments(parser)
    parser.add_argument("--max-connections", type=int, default=256)
    return parser


async def main_async(args: argparse.Namespace) -> None:
    transport = RedisStreamsTransport(args.redis_url)
    agent = ApiAgent(
        transport=transport,
        node_id=args.node_id,
        pool=args.pool,
        max_connections=args.max_connections,
        streams=streams_from(args),
        settings=settings_from(args),
    )
    try:
        await serve_until_signalled(agent)
    finally:
        await transport.close()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level)
    uvloop.run(main_async(args))  # a faster loop: every dispatch and result is a loop wake-up
    return 0


if __name__ == "__main__":
    sys.exit(main())
