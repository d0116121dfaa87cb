"""A pool's processes as real subprocesses — scheduler, CPU agents and, for the SDK, the web app
— on Redis and on the test's PostgreSQL database (``transaction=True``: the rows are committed,
so the subprocesses see them), under a stream prefix of their own."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis

ROOT = Path(__file__).resolve().parents[3]


@dataclass
class Cluster:
    """A scheduler and agents as subprocesses of one pool, on a unique stream prefix."""

    redis_url: str
    database_url: str
    work: Path
    pool: str
    prefix: str = field(default_factory=lambda: f"looprec-{uuid.uuid4().hex[:10]}")
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            DJANGO_SETTINGS_MODULE="controlplane.settings.dev",
            DATABASE_URL=self.database_url,
            REDIS_URL=self.redis_url,
            LOOM_STREAM_PREFIX=self.prefix,
            LOOM_LOG_LEVEL="WARNING",
            PYTHONPATH=str(ROOT),
        )
        return env

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = (self.work / f"{name}.log").open("ab")
        self.processes[name] = subprocess.Popen(
            argv, cwd=ROOT, env=self._env(), stdout=log, stderr=subprocess.STDOUT
        )

    def start_scheduler(self, *, max_attempts: int = 3, heartbeat_timeout: float = 15.0) -> None:
        self._spawn(
            "scheduler",
            [
                sys.executable, "manage.py", "run_scheduler", "--pool", self.pool,
                "--stream-prefix", self.prefix, "--max-attempts", str(max_attempts),
                "--heartbeat-timeout", str(heartbeat_timeout),
            ],
        )  # fmt: skip

    def start_agent(self, node: str, cores: str) -> None:
        self._spawn(
            node,
            [
                sys.executable, "-m", "workers.agents.cpu", "--redis-url", self.redis_url,
                "--pool", self.pool, "--node-id", node, "--stream-prefix", self.prefix,
                "--cores", cores, "--work-root", str(self.work / node),
                "--heartbeat-interval", "0.2", "--reclaim-idle-ms", "600000",
                "--log-level", "WARNING",
            ],
        )  # fmt: skip

    def start_web(self) -> str:
        """The ASGI app under uvicorn, as in production; returns its base URL once it answers."""
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self._spawn(
            "web",
            [
                sys.executable, "-m", "uvicorn", "controlplane.asgi:application", "--host",
                "127.0.0.1", "--port", str(port), "--log-level", "warning", "--no-access-log",
            ],
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    return url
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"the web process did not answer in 60 s\n{self.logs()}")
            time.sleep(0.1)

    def kill(self, name: str) -> None:
        process = self.processes.pop(name)
        process.send_signal(signal.SIGKILL)
        process.wait(10)

    def stop_all(self) -> None:
        for name in list(self.processes):
            process = self.processes.pop(name)
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        client = redis.Redis.from_url(self.redis_url)
        keys = list(client.scan_iter(match=f"{self.prefix}:*"))
        if keys:
            client.delete(*keys)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in self.work.glob("*.log"))
