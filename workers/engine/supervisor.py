"""Loom starts and supervises the LLM engines of a GPU node (Loom's own; SGLang's flags as in
``shared/FACTS.md``).

:func:`sglang_command` builds the server's command line with what the router relies on:
``--enable-priority-scheduling`` (the router passes Heddle's PPS priority in each request's
``priority`` field, heddle §5.2) with a schedule policy that allows it (``fcfs`` or ``lof``),
``--enable-metrics`` (the router reads each worker's running and queued requests and KV use),
the port and the model. :class:`EngineSupervisor` runs any such command as a child process:

- **start**: spawn, then wait until ``GET /health`` answers 200 (a model load takes minutes on a
  GPU: ``health_timeout_s``); a process that exits or never gets healthy is a failed start;
- **restart on crash** with exponential backoff (``backoff_s`` doubling up to ``backoff_max_s``;
  a run that stayed up ``stable_s`` resets it), at most ``max_restarts`` in a row;
- **drain**: ``draining`` is set (the router's drain endpoint takes the worker out of routing),
  then the supervisor waits until the engine's own metrics say nothing runs or queues, or
  ``drain_timeout_s``, and stops it: SIGTERM, then SIGKILL after ``stop_timeout_s``.

The engine's output goes to the supervisor's own stdout/stderr (the node's logs).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from workers.router.upstream import Upstream, UpstreamLost
from workers.router.worker_metrics import engine_metrics

log = logging.getLogger("loom.engine.supervisor")

SCHEDULE_POLICIES = ("fcfs", "lof")  # the ones SGLang allows with priority scheduling


def sglang_command(
    model_path: str,
    *,
    port: int,
    host: str = "127.0.0.1",
    tp: int = 1,
    schedule_policy: str = "fcfs",
    mem_fraction_static: float | None = None,
    preemption_threshold: int | None = None,
    extra: Sequence[str] = (),
    python: str = sys.executable,
) -> list[str]:
    """``python -m sglang.launch_server`` with the flags Loom's router needs (module docstring)."""
    if schedule_policy not in SCHEDULE_POLICIES:
        raise ValueError(
            f"schedule_policy must be one of {SCHEDULE_POLICIES} with priority scheduling, "
            f"got {schedule_policy!r}"
        )
    if tp < 1:
        raise ValueError(f"tp must be >= 1, got {tp}")
    argv = [
        python, "-m", "sglang.launch_server", "--model-path", model_path,
        "--host", host, "--port", str(port), "--tp-size", str(tp),
        "--enable-priority-scheduling", "--schedule-policy", schedule_policy,
        "--enable-metrics",
    ]  # fmt: skip
    if mem_fraction_static is not None:
        argv += ["--mem-fraction-static", str(mem_fraction_static)]
    if preemption_threshold is not None:
        argv += ["--priority-scheduling-preemption-threshold", str(preemption_threshold)]
    return argv + list(extra)


class EngineStartFailed(RuntimeError):
    """The engine exited, or did not answer ``/health``, before it was ready."""


@dataclass
class SupervisorPolicy:
    health_timeout_s: float = 600.0
    health_interval_s: float = 0.5
    backoff_s: float = 1.0
    backoff_max_s: float = 60.0
    stable_s: float = 300.0
    max_restarts: int = 10
    drain_timeout_s: float = 600.0
    stop_timeout_s: float = 30.0


class EngineSupervisor:
    """One engine process at ``url`` run from ``argv``, kept up (module docstring)."""

    def __init__(
        self,
        argv: Sequence[str],
        url: str,
        policy: SupervisorPolicy | None = None,
        *,
        on_start: Callable[[EngineSupervisor], None] | None = None,
    ) -> None:
        self.argv = list(argv)
        self.on_start = on_start  # called each time the engine has become healthy
        self.url = url
        self.policy = policy or SupervisorPolicy()
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.restarts = 0  # in a row (reset by a stable run)
        self.draining = False
        self.stopped = False
        self.last_exit: int | None = None
        self._task: asyncio.Task[None] | None = None
        self._upstream = Upstream(url)

    # ------------------------------------------------------------------ one run
    async def healthy(self) -> bool:
        try:
            response = await asyncio.wait_for(self._upstream.request("GET", "/health"), 5.0)
            await asyncio.wait_for(response.read(), 5.0)
            return response.status == 200
        except (UpstreamLost, OSError, TimeoutError):
            return False

    async def start(self) -> None:
        """Spawn the engine and wait until it is healthy; EngineStartFailed otherwise."""
        self.process = subprocess.Popen(self.argv)
        self.starts += 1
        deadline = time.monotonic() + self.policy.health_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.last_exit = self.process.returncode
                raise EngineStartFailed(f"engine exited with {self.last_exit} while starting")
            if await self.healthy():
                log.info("engine at %s is up (start %d)", self.url, self.starts)
                if self.on_start is not None:
                    self.on_start(self)
                return
            await asyncio.sleep(self.policy.health_interval_s)
        await self._terminate()
        raise EngineStartFailed(f"engine not healthy after {self.policy.health_timeout_s} s")

    async def _terminate(self) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        deadline = time.monotonic() + self.policy.stop_timeout_s
        while process.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if process.poll() is None:
            process.kill()
            await asyncio.to_thread(process.wait)
        self.last_exit = process.returncode

    # ------------------------------------------------------------------ supervision
    async def run(self) -> None:
        """Keep the engine up until :meth:`stop` or :meth:`drain`, or too many failed runs."""
        backoff = self.policy.backoff_s
        while not self.stopped:
            began = time.monotonic()
            try:
                await self.start()
                while self.process is not None and self.process.poll() is None:
                    if self.stopped:
                        return
                    await asyncio.sleep(self.policy.health_interval_s)
                self.last_exit = self.process.returncode if self.process else None
                if self.stopped:
                    return
                log.warning("engine at %s exited with %s", self.url, self.last_exit)
            except EngineStartFailed as error:
                log.warning("engine at %s failed to start: %s", self.url, error)
            if time.monotonic() - began >= self.policy.stable_s:
                backoff, self.restarts = self.policy.backoff_s, 0
            self.restarts += 1
            if self.restarts > self.policy.max_restarts:
                log.error("engine at %s: %d failed runs in a row; giving up", self.url,
                          self.restarts - 1)  # fmt: skip
                self.stopped = True
                return
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self.policy.backoff_max_s)

    def supervise(self) -> asyncio.Task[None]:
        """Run :meth:`run` in the background of the running loop; the task ends when the
        supervisor gives up or is stopped."""
        self._task = asyncio.get_running_loop().create_task(self.run())
        return self._task

    async def idle(self) -> bool:
        """Nothing runs or queues on the engine, by its own metrics (False when unreadable)."""
        try:
            response = await asyncio.wait_for(self._upstream.request("GET", "/metrics"), 5.0)
            text = await asyncio.wait_for(response.read(), 5.0)
        except (UpstreamLost, OSError, TimeoutError):
            return False
        if response.status != 200:
            return False
        metrics = engine_metrics(text.decode("utf-8", "replace"))
        return metrics.running_requests == 0 and metrics.queued_requests == 0

    async def drain(self) -> bool:
        """Let what the engine holds finish, then stop it; whether it was idle before the
        timeout (else it is stopped anyway)."""
        self.draining = True
        deadline = time.monotonic() + self.policy.drain_timeout_s
        idle = False
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None or await self.idle():
                idle = True
                break
            await asyncio.sleep(self.policy.health_interval_s)
        await self.stop()
        return idle

    async def stop(self) -> None:
        self.stopped = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._terminate()
        await self._upstream.close()
