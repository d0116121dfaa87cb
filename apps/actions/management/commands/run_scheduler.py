"""``python manage.py run_scheduler --pool NAME``: the scheduler service of one pool, over Redis."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
from typing import Any

import uvloop
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.actions.scheduler_store import DjangoActionStore
from apps.core.live import pool_snapshot_publish
from controlplane.db_maintenance import DatabaseMaintainer
from controlplane.redis_client import key_prefix
from workers.algorithms.tangram.eviction import REST_MODELS
from workers.algorithms.tangram.scheduler import DEFAULT_CANDIDATE_CAP
from workers.scheduler import SchedulerService, ServiceConfig
from workers.transport import RedisStreamsTransport, StreamNames


def _candidate_cap(value: str) -> int | None:
    """``--candidate-cap``: a positive count, or ``none`` (no cap)."""
    if value.lower() == "none":
        return None
    try:
        cap = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a count or 'none': {value!r}") from None
    if cap < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1 or 'none', got {cap}")
    return cap


class Command(BaseCommand):
    help = "Run the ARL-Tangram scheduler service of one resource pool (needs REDIS_URL)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--pool", required=True, help="resource pool name")
        parser.add_argument("--instance", default=socket.gethostname(), help="consumer name")
        parser.add_argument("--max-attempts", type=int, default=3)
        parser.add_argument("--heartbeat-timeout", type=float, default=15.0, help="seconds")
        parser.add_argument(
            "--result-grace",
            type=float,
            default=30.0,
            help="seconds past an action's timeout before a silent agent's action is timed out",
        )
        parser.add_argument(
            "--rest-model",
            choices=REST_MODELS,
            default="efficient",
            help="how a pass's estimate places the remaining actions (workers/algorithms/tangram)",
        )
        parser.add_argument(
            "--candidate-cap",
            type=_candidate_cap,
            default=DEFAULT_CANDIDATE_CAP,
            help="most candidates one pass admits, or 'none' for the whole FCFS prefix that fits",
        )
        parser.add_argument(
            "--stream-prefix",
            default=None,
            help="key prefix of the streams (default: LOOM_STREAM_PREFIX, else 'loom')",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.REDIS_URL:
            raise CommandError(
                "REDIS_URL is not set: the standalone scheduler talks to its agents over Redis "
                "Streams (the embedded demo runs it in-process instead: make demo)"
            )
        if options["max_attempts"] < 1:
            raise CommandError("--max-attempts must be >= 1")
        logging.basicConfig(level=settings.LOG_LEVEL)
        config = ServiceConfig(
            pool=options["pool"],
            instance=options["instance"],
            max_attempts=options["max_attempts"],
            heartbeat_timeout_s=options["heartbeat_timeout"],
            result_grace_s=options["result_grace"],
            rest_model=options["rest_model"],
            candidate_cap=options["candidate_cap"],
            store_inline=True,
            freeze_gc_after_start_up=True,
        )
        prefix = options["stream_prefix"] or key_prefix()
        # This process runs nothing but the service, whose loop waits for every store call: the
        # calls run on the loop's thread (ServiceConfig.store_inline), so Django must allow ORM
        # use there. Safe here: each store call is one synchronous call without an await inside,
        # so nothing interleaves on the connection.
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
        # The scheduler's store is the heaviest writer: it keeps the tables vacuumed where the
        # PostgreSQL server's autovacuum is off (controlplane/db_maintenance.py says why).
        maintainer = DatabaseMaintainer().start()
        try:
            uvloop.run(self._serve(config, StreamNames(prefix=prefix)))
        except LookupError as exc:
            raise CommandError(str(exc)) from exc
        finally:
            maintainer.stop()

    async def _serve(self, config: ServiceConfig, streams: StreamNames) -> None:
        assert settings.REDIS_URL is not None  # checked in handle()
        transport = RedisStreamsTransport(settings.REDIS_URL)
        service = SchedulerService(
            config=config,
            transport=transport,
            store=DjangoActionStore(),
            streams=streams,
            publish_snapshot=pool_snapshot_publish,  # to the dashboard, which registers for them
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await service.run(stop)
        finally:
            await transport.close()
