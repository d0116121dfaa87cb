"""A pool's processes as real subprocesses — scheduler, CPU agents and, for the SDK, the web app
— on Redis and on the test's PostgreSQL database (``transaction=True``: the rows are committed,
so the subprocesses see them), under a stream prefix of their own."""

from __future__ import annotations

import os
import socket
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis

from bench._execution import ROOT, Children, scheduler_argv, wait_for


@dataclass
class Cluster:
    """A scheduler and agents as subprocesses of one pool, on a unique stream prefix."""

    redis_url: str
    database_url: str
    work: Path
    pool: str
    prefix: str = field(default_factory=lambda: f"looprec-{uuid.uuid4().hex[:10]}")
    children: Children = field(init=False)

    def __post_init__(self) -> None:
        self.children = Children(self.work)

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
        self.children.spawn(name, argv, self._env())

    def start_scheduler(
        self, *, max_attempts: int = 3, heartbeat_timeout: float = 15.0, result_grace: float = 30.0
    ) -> None:
        options = [
            "--max-attempts",
            str(max_attempts),
            "--heartbeat-timeout",
            str(heartbeat_timeout),
            "--result-grace",
            str(result_grace),
        ]
        self._spawn("scheduler", scheduler_argv(self.pool, self.prefix, *options))

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

    def start_gpu_agent(
        self,
        node: str,
        services: list[str],
        *,
        devices: int = 2,
        device_memory_mb: int = 1000,
        write_checkpoints: bool = True,
    ) -> None:
        """``python -m workers.agents.gpu`` on CPU stand-in devices; ``services`` are
        ``NAME=torch:TASK:DIR`` (each checkpoint written first by the agent itself unless
        ``write_checkpoints`` is off)."""
        argv = [
            sys.executable, "-m", "workers.agents.gpu", "--redis-url", self.redis_url,
            "--pool", self.pool, "--node-id", node, "--stream-prefix", self.prefix,
            "--devices", str(devices), "--device-memory-mb", str(device_memory_mb),
            "--heartbeat-interval", "0.2", "--reclaim-idle-ms", "600000", "--log-level", "WARNING",
        ]  # fmt: skip
        for service in services:
            _, task, path = service.partition("=")[2].split(":")
            argv += ["--service", service]
            if write_checkpoints:
                argv += ["--make-checkpoint", f"{task}:{path}"]
        self._spawn(node, argv)

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

        def answers() -> bool:
            try:
                return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        try:
            wait_for(answers, 60, "the web process answering", interval_s=0.1)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\n{self.logs()}") from None
        return url

    def kill(self, name: str) -> None:
        """SIGKILL: the process dies where it is."""
        self.children.stop(name, kill=True)

    def stop_all(self) -> None:
        self.children.stop_all()
        client = redis.Redis.from_url(self.redis_url)
        keys = list(client.scan_iter(match=f"{self.prefix}:*"))
        if keys:
            client.delete(*keys)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in self.work.glob("*.log"))
