"""``python -m workers.engine supervise``: start one LLM engine on this node and keep it up.

The engine is SGLang on GPU nodes (``--engine sglang --model-path DIR``: the server line of
:func:`~workers.engine.supervisor.sglang_command`, priority scheduling and metrics on), or Loom's
own engines (``--engine emulated`` / ``--engine llamacpp``: ``python -m workers.engine``).
Arguments after ``--`` go to the engine unchanged. The supervisor waits for the engine's
``/health``, restarts it after a crash with doubling backoff, and gives up after
``--max-restarts`` failed runs in a row (exit status 1).

SIGTERM or SIGINT drains: first, with ``--router URL --worker-name NAME``, the router is told to
stop routing to this worker (its admin drain endpoint, ``LOOM_ROUTER_ADMIN_TOKEN``); then the
supervisor waits until the engine's own metrics show nothing running or queued (at most
``--drain-timeout``) and stops it. A second signal stops the engine at once. Every start prints
one line with the engine's pid, for the node's logs.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import logging
import os
import signal
import sys

from workers.engine.supervisor import (
    SCHEDULE_POLICIES,
    EngineSupervisor,
    SupervisorPolicy,
    sglang_command,
)
from workers.router.upstream import Upstream, UpstreamLost

ENGINES = ("sglang", "emulated", "llamacpp")
log = logging.getLogger("loom.engine.supervise")


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The supervisor's own arguments; what follows ``--`` is kept as ``engine_args``."""
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    defaults = SupervisorPolicy()
    parser = argparse.ArgumentParser(
        prog="python -m workers.engine supervise", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    parser.add_argument("--engine", choices=ENGINES, default="sglang")
    parser.add_argument("--host", default="127.0.0.1", help="the engine's listening address")
    parser.add_argument("--port", type=int, default=30000, help="the engine's port")
    parser.add_argument("--model-path", default=None, help="sglang: the HF model directory")
    parser.add_argument("--tp", type=int, default=1, help="sglang: tensor-parallel degree")
    parser.add_argument("--schedule-policy", choices=SCHEDULE_POLICIES, default="fcfs")
    parser.add_argument("--mem-fraction-static", type=float, default=None)
    parser.add_argument(
        "--preemption-threshold", type=int, default=None,
        help="sglang: priority difference that preempts a running request",
    )  # fmt: skip
    parser.add_argument("--health-timeout", type=float, default=defaults.health_timeout_s)
    parser.add_argument("--health-interval", type=float, default=defaults.health_interval_s)
    parser.add_argument("--backoff", type=float, default=defaults.backoff_s)
    parser.add_argument("--backoff-max", type=float, default=defaults.backoff_max_s)
    parser.add_argument("--stable", type=float, default=defaults.stable_s)
    parser.add_argument("--max-restarts", type=int, default=defaults.max_restarts)
    parser.add_argument("--drain-timeout", type=float, default=defaults.drain_timeout_s)
    parser.add_argument("--stop-timeout", type=float, default=defaults.stop_timeout_s)
    parser.add_argument("--router", default=None, help="the router to drain this worker from")
    parser.add_argument("--worker-name", default=None, help="this worker's name in --router")
    args = parser.parse_args(argv)
    args.engine_args = extra
    if args.engine == "sglang" and not args.model_path:
        parser.error("--engine sglang needs --model-path")
    if args.engine != "sglang" and args.model_path:
        parser.error("--model-path is for sglang; pass the engine's own flags after --")
    if bool(args.router) != bool(args.worker_name):
        parser.error("--router and --worker-name go together")
    for name in ("health_timeout", "health_interval", "backoff", "backoff_max", "drain_timeout",
                 "stop_timeout"):  # fmt: skip
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be > 0")
    if args.max_restarts < 0 or args.stable < 0:
        parser.error("--max-restarts and --stable must be >= 0")
    return args


def engine_command(args: argparse.Namespace) -> list[str]:
    if args.engine == "sglang":
        return sglang_command(
            args.model_path, port=args.port, host=args.host, tp=args.tp,
            schedule_policy=args.schedule_policy, mem_fraction_static=args.mem_fraction_static,
            preemption_threshold=args.preemption_threshold, extra=args.engine_args,
        )  # fmt: skip
    return [
        sys.executable, "-m", "workers.engine", "--backend", args.engine,
        "--host", args.host, "--port", str(args.port), *args.engine_args,
    ]  # fmt: skip


def policy_of(args: argparse.Namespace) -> SupervisorPolicy:
    return SupervisorPolicy(
        health_timeout_s=args.health_timeout, health_interval_s=args.health_interval,
        backoff_s=args.backoff, backoff_max_s=args.backoff_max, stable_s=args.stable,
        max_restarts=args.max_restarts, drain_timeout_s=args.drain_timeout,
        stop_timeout_s=args.stop_timeout,
    )  # fmt: skip


async def drain_from_router(router: str, worker: str) -> None:
    """Ask the router to route nothing more to ``worker`` (best effort: logged on failure)."""
    token = os.environ.get("LOOM_ROUTER_ADMIN_TOKEN", "")
    upstream = Upstream(router)
    try:
        response = await asyncio.wait_for(
            upstream.request(
                "POST", f"/v1/loom/workers/{worker}/drain", b"",
                ((b"authorization", f"Bearer {token}".encode()),),
            ),
            5.0,
        )  # fmt: skip
        body = await asyncio.wait_for(response.read(), 5.0)
        if response.status != 200:
            log.warning("router %s refused to drain %s: %s", router, worker, body[:200])
    except (UpstreamLost, OSError, TimeoutError) as exc:
        log.warning("router %s not reached to drain %s: %s", router, worker, exc)
    finally:
        await upstream.close()


async def main(args: argparse.Namespace) -> int:
    if args.engine == "sglang" and importlib.util.find_spec("sglang") is None:
        print("sglang is not installed here (requirements/gpu.txt)", file=sys.stderr)
        return 2
    url = f"http://{args.host}:{args.port}"

    def started(supervisor: EngineSupervisor) -> None:
        pid = supervisor.process.pid if supervisor.process else None
        print(f"{args.engine} engine up on {url} (pid {pid}, start {supervisor.starts})",
              flush=True)  # fmt: skip

    supervisor = EngineSupervisor(engine_command(args), url, policy_of(args), on_start=started)
    signals = asyncio.Queue[int]()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, signals.put_nowait, number)
    print(f"supervising {args.engine} on {url}", flush=True)
    running = supervisor.supervise()
    waiter = loop.create_task(signals.get())
    await asyncio.wait((running, waiter), return_when=asyncio.FIRST_COMPLETED)
    if not waiter.done():  # the supervisor gave up
        waiter.cancel()
        await supervisor.stop()
        print(f"gave up after {supervisor.restarts - 1} failed runs in a row", flush=True)
        return 1
    print("draining", flush=True)
    drained = loop.create_task(drain(supervisor, args))
    again = loop.create_task(signals.get())
    await asyncio.wait((drained, again), return_when=asyncio.FIRST_COMPLETED)
    if not drained.done():
        drained.cancel()
        await asyncio.gather(drained, return_exceptions=True)
        await supervisor.stop()
        print("stopped without draining", flush=True)
        return 0
    again.cancel()
    print("drained" if drained.result() else "drain timed out; stopped", flush=True)
    return 0


async def drain(supervisor: EngineSupervisor, args: argparse.Namespace) -> bool:
    if args.router:
        await drain_from_router(args.router, args.worker_name)
    return await supervisor.drain()


def run(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO)
    return asyncio.run(main(parse_args(argv)))
