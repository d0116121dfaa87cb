"""``python -m workers.router --worker URL [--worker URL ...]``: the LLM router process."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import os
from pathlib import Path

import redis.asyncio as aioredis

from workers.engine.asgi import bind
from workers.router.app import RouterApp
from workers.router.live_policy import PolicyFeed
from workers.router.policies import POLICIES, RoutingPolicy, make_policy
from workers.router.pool import WorkerPool
from workers.router.predictor_feed import PredictorFeed
from workers.router.registry import Registry, RegistryNames, StatePublisher
from workers.router.server import DEFAULT_SERVER, SERVERS, make_server
from workers.router.trajectories import TrajectoryTable
from workers.router.upstream import Upstream


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m workers.router", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100, help="0: any free port (printed)")
    parser.add_argument("--worker", action="append", required=True, help="an LLM worker's URL")
    parser.add_argument("--policy", choices=sorted(POLICIES), default="heddle")
    parser.add_argument("--batch-limit", type=int, default=256, help="workers' running cap")
    parser.add_argument(
        "--group-limit", type=int, default=None, help="heddle: most trajectories per worker"
    )
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("REDIS_URL"),
        help="Redis of the control plane (keys, trajectories, state stream); env REDIS_URL",
    )
    parser.add_argument(
        "--prefix", default=os.environ.get("LOOM_STREAM_PREFIX", "loom"), help="Redis key prefix"
    )
    parser.add_argument(
        "--open",
        action="store_true",
        help="no keys and no trajectory registry (local experiments only; refuses --redis-url)",
    )
    parser.add_argument("--health-interval", type=float, default=1.0)
    parser.add_argument(
        "--http-server",
        choices=sorted(SERVERS),
        default=DEFAULT_SERVER,
        help="lean: the router's own HTTP/1.1 server (workers/router/server.py); uvicorn",
    )
    parser.add_argument(
        "--name",
        default=os.environ.get("LOOM_ROUTER_NAME", "router"),
        help="this router's name: its workers' reports and the policy the dashboard sets for it",
    )
    parser.add_argument(
        "--metrics-interval", type=float, default=1.0, help="how often to read workers' /metrics"
    )
    parser.add_argument(
        "--history-trace",
        type=Path,
        default=None,
        help="recorded trajectories (JSONL trace rows) the length predictor starts from",
    )
    parser.add_argument(
        "--predictor",
        choices=("prompt_history", "progressive"),
        default="prompt_history",
        help="the prompt-history prior, or the progressive model (heddle §4.1): trained on "
        "--history-trace when given, else the one the control plane trains from recorded "
        "trajectories, followed as new versions are published",
    )
    parser.add_argument(
        "--predictor-poll-s",
        type=float,
        default=30.0,
        help="how often to look for a newly trained length predictor",
    )
    parser.add_argument(
        "--trajectory-idle-s",
        type=float,
        default=600.0,
        help="forget a trajectory with no request for this long (never ended by its trainer)",
    )
    args = parser.parse_args(argv)
    if args.open == bool(args.redis_url):
        parser.error("give --redis-url (or REDIS_URL) for the control plane's keys, or --open")
    return args


async def served_models(urls: list[str]) -> tuple[str, ...]:
    """The model ids the workers serve (their ``/v1/models``), in first-seen order."""
    models: list[str] = []
    for url in urls:
        upstream = Upstream(url)
        try:
            response = await upstream.request("GET", "/v1/models")
            for entry in json.loads(await response.read()).get("data", []):
                if entry.get("id") not in models:
                    models.append(entry["id"])
        except (OSError, ValueError) as exc:
            logging.getLogger("loom.router").warning("no model list from %s: %s", url, exc)
        finally:
            await upstream.close()
    return tuple(models)


def trajectory_table(history_trace: Path | None, predictor: str) -> TrajectoryTable:
    """The router's trajectory table; its predictor learned from ``history_trace`` when given
    (heddle §4.1: the prompt-history prior, or the progressive model on runtime features)."""
    if history_trace is None:
        return TrajectoryTable()
    from workers.algorithms.heddle.prediction import ProgressivePredictor, PromptHistoryPredictor
    from workers.sim.llm.trajectories import read_jsonl

    records = read_jsonl(history_trace)
    prior = PromptHistoryPredictor().fit(records)
    if predictor == "progressive":
        return TrajectoryTable(ProgressivePredictor(prior).fit(records))
    return TrajectoryTable(prior)


async def main(args: argparse.Namespace) -> None:
    pool = WorkerPool(
        args.worker,
        health_interval_s=args.health_interval,
        metrics_interval_s=args.metrics_interval,
    )
    names = RegistryNames(args.prefix)
    client = None
    if not args.open:
        # A bounded pool that waits for a free connection: a burst of first requests (each
        # trajectory's first lookup) queues briefly instead of failing.
        pool_of_connections = aioredis.BlockingConnectionPool.from_url(
            args.redis_url, max_connections=32, timeout=5
        )
        client = aioredis.Redis(connection_pool=pool_of_connections)
    registry = None if client is None else Registry(client, names)
    publisher = StatePublisher(client, names)
    models = await served_models(args.worker)
    if not models:
        raise SystemExit("no worker answered /v1/models; start the workers first")
    table = trajectory_table(args.history_trace, args.predictor)
    feed = None
    if args.history_trace is None and client is not None:
        # Followed even on the prompt-history prior: the dashboard may switch to it live.
        feed = PredictorFeed(client, names, table, interval_s=args.predictor_poll_s)
        feed.active = args.predictor == "progressive"

    def policy_named(name: str) -> RoutingPolicy:
        return make_policy(name, batch_limit=args.batch_limit, group_limit=args.group_limit)

    app = RouterApp(
        pool,
        policy_named(args.policy),
        registry=registry,
        table=table,
        models=models,
        admin_token=os.environ.get("LOOM_ROUTER_ADMIN_TOKEN"),
        publish=publisher.publish,
        name=args.name,
    )
    live = None
    if client is not None:
        live = PolicyFeed(
            client, names, args.name, app.forwarder, policy_named, predictor=args.predictor,
            predictors=feed,
        )  # fmt: skip
    server = make_server(app, bind(args.host, args.port), args.http_server)
    await pool.start()
    await publisher.start()
    if registry is not None:
        await registry.start()
    if feed is not None:
        await feed.start()
    if live is not None:
        await live.start()
    # What exists now (modules, the predictor, the policy) lives as long as the process: kept
    # out of the collector's full passes, which otherwise walk all of it while every stream in
    # flight waits.
    gc.freeze()
    print(f"router ({args.policy}) serving {', '.join(models)} on {server.url}", flush=True)

    async def sweep() -> None:
        while True:
            await asyncio.sleep(min(args.trajectory_idle_s / 4, 30.0))
            app.forwarder.expire_idle(args.trajectory_idle_s)

    sweeper = asyncio.get_running_loop().create_task(sweep())
    try:
        await server.serve_forever()
    finally:
        sweeper.cancel()
        if live is not None:
            await live.stop()
        if feed is not None:
            await feed.stop()
        await pool.close()
        await publisher.close()
        if registry is not None:
            await registry.close()
        if client is not None:
            await client.aclose()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    import uvloop

    with contextlib.suppress(KeyboardInterrupt):  # uvicorn re-raises the SIGINT it handled
        uvloop.run(main(parse_args()))
