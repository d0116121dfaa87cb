"""``python -m workers.agents.cpu --redis-url URL --pool NAME --node-id ID --backend local|docker``.

Needs Redis only (no Django, no database). The local backend runs every action in a bubblewrap
sandbox as an unprivileged user and refuses to start without one unless
``--insecure-unsandboxed-actions`` (or LOOM_INSECURE_UNSANDBOXED_ACTIONS=1) is given.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import uvloop

from workers.agents.common.cli import (
    add_common_arguments,
    configure_logging,
    serve_until_signalled,
    settings_from,
    streams_from,
)
from workers.agents.common.sysinfo import parse_cpu_list
from workers.agents.cpu.agent import CpuAgent
from workers.agents.cpu.backend import ExecutionBackend
from workers.agents.cpu.cgroups import detect_cgroup_driver
from workers.agents.cpu.docker import DockerBackend
from workers.agents.cpu.local import DEFAULT_PIDS_LIMIT, LocalBackend
from workers.agents.cpu.sandbox import DEFAULT_USER, insecure_from_env, open_sandbox
from workers.transport.redis_streams import RedisStreamsTransport


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m workers.agents.cpu", description=__doc__)
    add_common_arguments(parser)
    parser.add_argument("--backend", choices=("local", "docker"), default="local")
    parser.add_argument("--cores", help="cores to offer, e.g. 0-3,6 (default: all usable)")
    parser.add_argument("--memory-mb", type=int, help="memory to offer (default: MemTotal)")
    parser.add_argument("--idle-ttl", type=float, default=900.0, help="sandbox idle TTL, s")
    parser.add_argument("--work-root", type=Path, help="local: per-trajectory directories here")
    parser.add_argument(
        "--isolation",
        choices=("auto", "affinity"),
        default="auto",
        help="local: cgroups when writable (auto) or CPU affinity only",
    )
    parser.add_argument("--cgroup-v2-root", type=Path, help="local: a delegated cgroup v2 dir")
    parser.add_argument(
        "--sandbox-user", default=DEFAULT_USER, help="local: account (or uid:gid) actions run as"
    )
    parser.add_argument(
        "--ro-bind",
        type=Path,
        action="append",
        default=[],
        help="local: a tool runtime (e.g. a virtualenv) bound read-only into every sandbox",
    )
    parser.add_argument(
        "--pids-limit", type=int, default=DEFAULT_PIDS_LIMIT, help="local: per-action pids limit"
    )
    parser.add_argument(
        "--insecure-unsandboxed-actions",
        action="store_true",
        help="local: run actions WITHOUT a sandbox where bubblewrap cannot run (any job key "
        "then acts with this agent's privileges)",
    )
    parser.add_argument("--image", default="loom-busybox:local", help="docker: sandbox image")
    parser.add_argument("--docker-host", help="docker: e.g. unix:///run/docker.sock")
    return parser


def build_backend(args: argparse.Namespace) -> ExecutionBackend:
    if args.backend == "docker":
        return DockerBackend(
            node_id=args.node_id,
            image=args.image,
            docker_host=args.docker_host,
            idle_ttl_s=args.idle_ttl,
        )
    cgroups = (
        None
        if args.isolation == "affinity"
        else detect_cgroup_driver(args.node_id, v2_root=args.cgroup_v2_root)
    )
    sandbox = open_sandbox(
        insecure=args.insecure_unsandboxed_actions or insecure_from_env(),
        user=args.sandbox_user,
        ro_binds=args.ro_bind,
        protected=[args.work_root] if args.work_root else [],
    )
    return LocalBackend(
        node_id=args.node_id,
        work_root=args.work_root,
        cgroups=cgroups,
        idle_ttl_s=args.idle_ttl,
        sandbox=sandbox,
        pids_limit=args.pids_limit,
    )


async def main_async(args: argparse.Namespace) -> None:
    transport = RedisStreamsTransport(args.redis_url)
    agent = CpuAgent(
        transport=transport,
        node_id=args.node_id,
        pool=args.pool,
        backend=build_backend(args),
        cores=parse_cpu_list(args.cores) if args.cores else None,
        memory_mb=args.memory_mb,
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
