"""Shared plumbing of the execution-plane benchmarks (overhead, real_cpu, recovery).

Each benchmark runs the real processes on this machine: a throwaway PostgreSQL database created
for the run and dropped after it (never one this code did not create), Redis under a unique key
prefix in a database of its own (keys deleted after, never FLUSHDB), Django set up in child
processes only, so ``python -m bench all`` can run them one after another in one interpreter.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
POSTGRES_DEFAULT = "postgres://postgres@127.0.0.1:5432"
REDIS_DEFAULT = "redis://127.0.0.1:6379/14"
LOOPBACK = "127.0.0.1"


class Unavailable(RuntimeError):
    """PostgreSQL or Redis is not reachable: the benchmark cannot run here."""


def postgres_server() -> str:
    return os.environ.get("LOOM_BENCH_POSTGRES", POSTGRES_DEFAULT)


def redis_url() -> str:
    return os.environ.get("LOOM_BENCH_REDIS", REDIS_DEFAULT)


@contextmanager
def throwaway_database(label: str) -> Iterator[str]:
    """Create ``loom_bench_<label>_<pid>``, yield its URL, drop it after (only that one)."""
    import psycopg

    name = f"loom_bench_{label}_{os.getpid()}"
    server = postgres_server()
    try:
        with psycopg.connect(f"{server}/postgres", autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # ours, from a crash
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        raise Unavailable(f"PostgreSQL at {server} is not usable: {exc}") from exc
    try:
        yield f"{server}/{name}"
    finally:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def redis_prefix(label: str) -> Iterator[str]:
    """A unique stream prefix; every key under it is deleted afterwards."""
    import redis

    client = redis.Redis.from_url(redis_url(), socket_connect_timeout=2)
    try:
        client.ping()
    except redis.RedisError as exc:
        raise Unavailable(f"Redis at {redis_url()} is not reachable: {exc}") from exc
    prefix = f"loombench-{label}-{uuid.uuid4().hex[:8]}"
    try:
        yield prefix
    finally:
        keys = list(client.scan_iter(match=f"{prefix}:*"))
        if keys:
            client.delete(*keys)
        client.close()


def django_env(
    database_url: str, *, redis: str | None = None, prefix: str = "loom"
) -> dict[str, str]:
    """Environment of a child process running Django against the throwaway database.

    Production settings (DEBUG off: no per-query bookkeeping), with a throwaway secret key.
    """
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="controlplane.settings.prod",
        LOOM_SECRET_KEY=f"bench-{uuid.uuid4().hex}{uuid.uuid4().hex}",
        LOOM_SECURE_COOKIES="false",
        DATABASE_URL=database_url,
        LOOM_LOG_LEVEL="WARNING",
        LOOM_STREAM_PREFIX=prefix,
        PYTHONPATH=str(ROOT),
    )
    if redis:
        env["REDIS_URL"] = redis
    else:
        env.pop("REDIS_URL", None)
    return env


def run_child(function: str, env: dict[str, str], *args: Any, timeout_s: float = 600) -> Any:
    """Run ``bench.<module>.<function>(*args)`` in a Django child; returns its JSON result.

    The child prints its result as the last line of stdout.
    """
    module, name = function.rsplit(".", 1)
    code = (
        "import sys, json, django; django.setup(); "
        f"from {module} import {name}; "
        f"print(json.dumps({name}(*json.loads(sys.argv[1]))))"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code, json.dumps(list(args))],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"{function} failed:\n{completed.stderr[-4000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


@dataclass
class Children:
    """Long-running child processes (scheduler, agents, web, celery) stopped together."""

    log_dir: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def spawn(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        log = (self.log_dir / f"{name}.log").open("ab")
        process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.processes[name] = process
        return process

    def stop(self, name: str, *, kill: bool = False) -> None:
        process = self.processes.pop(name, None)
        if process is None:
            return
        if kill:
            process.kill()
        else:
            process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)

    def stop_all(self) -> None:
        for name in list(self.processes):
            self.stop(name)

    def log_tail(self, name: str, chars: int = 3000) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""


def scheduler_argv(pool: str, prefix: str, *extra: str) -> list[str]:
    return [
        sys.executable, "manage.py", "run_scheduler", "--pool", pool, "--stream-prefix", prefix,
        *extra,
    ]  # fmt: skip


def cpu_agent_argv(pool: str, node: str, prefix: str, work_root: Path, cores: str) -> list[str]:
    return [
        sys.executable, "-m", "workers.agents.cpu", "--redis-url", redis_url(), "--pool", pool,
        "--node-id", node, "--stream-prefix", prefix, "--cores", cores,
        "--work-root", str(work_root), "--heartbeat-interval", "0.5", "--log-level", "WARNING",
    ]  # fmt: skip


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


def listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.2)
        return probe.connect_ex((LOOPBACK, port)) == 0


def wait_for(condition: Any, timeout_s: float, what: str, interval_s: float = 0.02) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached in {timeout_s:.0f} s")
        time.sleep(interval_s)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]
