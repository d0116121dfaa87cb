"""Throwaway servers and a Loom process cluster, for the benchmarks that break things.

Everything here is this run's own: a PostgreSQL cluster ``initdb``-ed into a temporary directory
and a ``redis-server``, each on a free loopback port (so restarting or killing them touches no one
else's server), a loopback TCP proxy that can cut one client off from a server, and the Loom
processes themselves — uvicorn web, ``manage.py run_scheduler``, ``python -m workers.agents.cpu``
— as real child processes.

Typical use::

    with PostgresServer.started(tmp) as pg, RedisServer.started(tmp) as redis:
        with pg.database("soak") as database:
            cluster = Cluster(log_dir, database, redis.url(), prefix="soak")
            seeded = cluster.seed(pool="cpu")           # migrate, pool, job, API key
            cluster.start_web(); cluster.start_scheduler("cpu")
            cluster.start_agent("cpu", "node-a", work_root)
            cluster.wait_ready()
            ...                                         # seeded["key"], cluster.url
            cluster.stop_all()
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from bench._execution import (
    LOOPBACK,
    Children,
    Unavailable,
    django_env,
    free_port,
    listening,
    run_child,
    scheduler_argv,
    wait_for,
)

# --- PostgreSQL --------------------------------------------------------------------------------


def _postgres_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    if initdb is None:
        raise Unavailable("no PostgreSQL server binaries (initdb) under /usr/lib/postgresql")
    return Path(initdb).parent


class PostgresServer:
    """A PostgreSQL cluster of this run's own: trust auth, loopback only, a free port.

    As root, the server runs as the ``postgres`` system user (PostgreSQL refuses root).
    ``fsync=off``: an immediate stop kills the server, not the machine, so nothing is lost.
    """

    def __init__(self, scratch: Path) -> None:
        self.bin = _postgres_bin()
        self.root = scratch / f"pg-{uuid.uuid4().hex[:6]}"
        self.data = self.root / "data"
        self.port = free_port()
        self.user: str | None = None
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError as exc:
                raise Unavailable("running as root and there is no 'postgres' user") from exc
            self.user = "postgres"

    @property
    def server_url(self) -> str:
        return f"postgres://postgres@{LOOPBACK}:{self.port}"

    def _run(self, *argv: str, timeout_s: float = 60) -> None:
        completed = subprocess.run(
            argv, user=self.user, capture_output=True, text=True, timeout=timeout_s, check=False
        )
        if completed.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed:\n{completed.stdout}{completed.stderr}")

    def init(self) -> None:
        self.root.mkdir(parents=True)
        if self.user is not None:
            shutil.chown(self.root, self.user)
            os.chmod(self.root.parent, 0o755)
        self._run(
            str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust",
            "-E", "UTF8", "--no-sync",
        )  # fmt: skip

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses={LOOPBACK} -c fsync=off "
            "-c max_connections=200 -c full_page_writes=off"
        )
        self._run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options,
            "-l", str(self.root / "server.log"), "-w", "-t", "60", "start",
        )  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        """``mode``: ``fast`` (sessions ended cleanly) or ``immediate`` (a crash: WAL replay)."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    @classmethod
    @contextmanager
    def started(cls, scratch: Path) -> Iterator[PostgresServer]:
        server = cls(scratch)
        server.init()
        server.start()
        try:
            yield server
        finally:
            if server.running():
                with suppress(Exception):
                    server.stop("immediate")
            shutil.rmtree(server.root, ignore_errors=True)

    @contextmanager
    def database(self, label: str) -> Iterator[str]:
        """A fresh database on this server; yields its URL (the server goes with the run)."""
        import psycopg

        name = f"loom_{label}_{uuid.uuid4().hex[:6]}"
        with psycopg.connect(f"{self.server_url}/postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        yield f"{self.server_url}/{name}"


# --- Redis -------------------------------------------------------------------------------------


class RedisServer:
    """A ``redis-server`` of this run's own on a free loopback port.

    Configured as ``deploy/docker-compose.yml`` runs it: no persistence (``--save ""
    --appendonly no``), so a restart comes back empty — streams, consumer groups and pending
    entries are gone, and every client must cope with that.
    """

    def __init__(self, scratch: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise Unavailable("redis-server is not installed")
        self.binary = binary
        self.dir = scratch / f"redis-{uuid.uuid4().hex[:6]}"
        self.dir.mkdir(parents=True)
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://{LOOPBACK}:{self.port}/{db}"

    def start(self) -> None:
        log = (self.dir / "redis.log").open("ab")
        self.process = subprocess.Popen(
            [
                self.binary, "--port", str(self.port), "--bind", LOOPBACK, "--save", "",
                "--appendonly", "no", "--dir", str(self.dir), "--daemonize", "no",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        wait_for(lambda: listening(self.port), 30, "redis-server")

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
            self.process = None

    @classmethod
    @contextmanager
    def started(cls, scratch: Path) -> Iterator[RedisServer]:
        server = cls(scratch)
        server.start()
        try:
            yield server
        finally:
            server.stop()
            shutil.rmtree(server.dir, ignore_errors=True)


# --- a TCP proxy that can cut its clients off ---------------------------------------------------


class TcpProxy:
    """Loopback TCP proxy to ``target_port``. ``cut()`` resets every connection through it and
    refuses new ones (the client sees its server gone) until ``restore()``."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._cut = False
        self._closed = False
        self._listener = socket.create_server((LOOPBACK, self.port))
        self._listener.settimeout(0.2)
        self._thread = threading.Thread(target=self._accept_loop, daemon=True, name="tcp-proxy")
        self._thread.start()

    def url(self, db: int = 0) -> str:
        return f"redis://{LOOPBACK}:{self.port}/{db}"

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            if self._cut:
                _reset(client)
                continue
            try:
                upstream = socket.create_connection((LOOPBACK, self.target_port), timeout=2)
            except OSError:
                _reset(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                self._pairs.append((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            pairs, self._pairs = self._pairs, []
        for client, upstream in pairs:
            _reset(client)
            _reset(upstream)

    def restore(self) -> None:
        self._cut = False

    def close(self) -> None:
        self._closed = True
        self.cut()
        self._listener.close()
        self._thread.join(2)


def _reset(sock: socket.socket) -> None:
    with suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    with suppress(OSError):
        sock.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


# --- the Loom processes --------------------------------------------------------------------------


def seed(pool: str, trajectories: int) -> dict[str, Any]:
    """(Django child) Migrate; one CPU pool, one job, its API key and ``trajectories`` of its
    trajectories."""
    from django.contrib.auth.models import User
    from django.core.management import call_command

    from apps.jobs.models import Job
    from apps.jobs.services import api_key_create
    from apps.resources.models import PoolKind, ResourcePool
    from apps.trajectories.services import trajectory_create

    call_command("migrate", verbosity=0, interactive=False)
    ResourcePool.objects.create(name=pool, kind=PoolKind.CPU)
    job = Job.objects.create(name="bench", owner=User.objects.create_user("bench"))
    _, raw_key = api_key_create(job=job, name="bench")
    ids = [trajectory_create(job=job).pk for _ in range(trajectories)]
    return {"key": raw_key, "job": job.pk, "trajectories": ids}


class Cluster:
    """Loom's processes over one database, one Redis and one stream prefix.

    ``spawn`` names are ``web``, ``scheduler-<pool>`` and ``agent-<node>``; each logs to
    ``log_dir/<name>.log``. ``children`` is the underlying :class:`bench._execution.Children`.
    """

    def __init__(self, log_dir: Path, database_url: str, redis_url: str, prefix: str) -> None:
        self.log_dir = log_dir
        self.database_url = database_url
        self.redis_url = redis_url
        self.prefix = prefix
        self.children = Children(log_dir)
        self.env = django_env(database_url, redis=redis_url, prefix=prefix)
        self.web_port = free_port()
        self.url = f"http://{LOOPBACK}:{self.web_port}"

    def seed(self, pool: str, trajectories: int = 0) -> dict[str, Any]:
        quiet = django_env(self.database_url, prefix=self.prefix)  # announces nothing
        result: dict[str, Any] = run_child("bench._cluster.seed", quiet, pool, trajectories)
        return result

    def start_web(self, *, wait: bool = True) -> subprocess.Popen[bytes]:
        process = self.children.spawn(
            "web",
            [
                sys.executable, "-m", "uvicorn", "controlplane.asgi:application", "--host",
                LOOPBACK, "--port", str(self.web_port), "--log-level", "warning",
                "--no-access-log",
            ],
            self.env,
        )  # fmt: skip
        if wait:
            wait_for(lambda: listening(self.web_port), 60, "the web server", 0.01)
        return process

    def kill_web(self) -> None:
        """SIGKILL the web process (no cleanup of any kind)."""
        self.children.stop("web", kill=True)

    def start_scheduler(self, pool: str, *extra: str) -> subprocess.Popen[bytes]:
        return self.children.spawn(
            f"scheduler-{pool}", scheduler_argv(pool, self.prefix, *extra), self.env
        )

    def start_agent(
        self,
        pool: str,
        node: str,
        work_root: Path,
        *,
        redis_url: str | None = None,
        cores: str | None = None,
        extra: tuple[str, ...] = (),
    ) -> subprocess.Popen[bytes]:
        """A CPU agent (local backend). ``redis_url``: another way to the same Redis (a proxy)."""
        argv = [
            sys.executable, "-m", "workers.agents.cpu", "--redis-url", redis_url or self.redis_url,
            "--pool", pool, "--node-id", node, "--stream-prefix", self.prefix,
            "--work-root", str(work_root), "--heartbeat-interval", "0.5", "--log-level", "WARNING",
        ]  # fmt: skip
        if cores is not None:
            argv += ["--cores", cores]
        return self.children.spawn(f"agent-{node}", [*argv, *extra], self.env)

    def signal(self, name: str, signum: signal.Signals) -> None:
        self.children.processes[name].send_signal(signum)

    def check_alive(self) -> None:
        """Raise with its log tail if a child exited."""
        for name, process in self.children.processes.items():
            if process.poll() is not None:
                raise RuntimeError(
                    f"{name} exited with {process.returncode}:\n{self.children.log_tail(name)}"
                )

    def logs(self) -> str:
        return "\n".join(
            f"--- {name}\n{self.children.log_tail(name)}"
            for name in sorted(p.stem for p in self.log_dir.glob("*.log"))
        )

    def stop_all(self) -> None:
        self.children.stop_all()


def wait_until(condition: Any, timeout_s: float, interval_s: float = 0.05) -> bool:
    """Like ``wait_for`` but answers False instead of raising when time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval_s)
    return bool(condition())
