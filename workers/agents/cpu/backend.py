"""The execution-backend interface of the CPU agent and helpers every backend uses."""

from __future__ import annotations

import abc
import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from workers.agents.common import procs
from workers.threads import OwnThreads
from workers.transport.messages import Dispatch

T = TypeVar("T")
logger = logging.getLogger(__name__)

_READ_CHUNK = 64 * 1024
BLOCKING_THREADS = 4
_KILL_RETRY_S = 0.25  # how long a reap waits for the child before it kills the leftovers again


@dataclass(frozen=True)
class ExecOutcome:
    """What a backend observed; the agent turns it into an ActionResult status and reason."""

    exit_code: int | None
    output: bytes
    output_truncated: bool
    started_at: float
    finished_at: float
    timed_out: bool = False
    oom_killed: bool = False
    infra_error: str | None = None


class ExecutionBackend(abc.ABC):
    """Runs one Dispatch's command on its cores and cleans everything up afterwards."""

    name: str = "abstract"
    _blocking_threads: OwnThreads | None = None

    async def blocking(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking helper (cgroup files, process scans, rmtree) on this backend's own
        threads (workers/threads.py), so that nothing else in the process can stall it."""
        if self._blocking_threads is None:
            self._blocking_threads = OwnThreads(BLOCKING_THREADS, f"loom-{self.name}-backend")
        return await self._blocking_threads.run(function, *args, **kwargs)

    def stop_blocking_threads(self) -> None:
        if self._blocking_threads is not None:
            self._blocking_threads.close()

    @abc.abstractmethod
    async def run(self, dispatch: Dispatch) -> ExecOutcome:
        """Run to the end (exit, timeout). On cancellation: kill everything, then re-raise."""

    @abc.abstractmethod
    async def end_trajectory(self, trajectory_id: str) -> None:
        """Remove the trajectory's sandbox (working dir or container)."""

    @abc.abstractmethod
    async def clean_lost_attempt(self, dispatch: Dispatch) -> None:
        """Kill what a dead agent left running for this dispatch (after a reclaim)."""

    @abc.abstractmethod
    async def sweep_idle(self, now: float) -> list[str]:
        """Remove sandboxes idle past their TTL; returns the trajectory ids removed."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Remove every sandbox this backend created."""


async def read_capped(reader: asyncio.StreamReader, cap_bytes: int) -> tuple[bytes, bool]:
    """Read to EOF keeping at most ``cap_bytes``; the rest is drained so the writer never blocks."""
    kept = bytearray()
    truncated = False
    while True:
        chunk = await reader.read(_READ_CHUNK)
        if not chunk:
            return bytes(kept), truncated
        room = cap_bytes - len(kept)
        if len(chunk) > room:
            truncated = True
            if room > 0:
                kept += chunk[:room]
        else:
            kept += chunk


async def finish_despite_cancel(awaitable: Awaitable[T]) -> tuple[T, bool]:
    """Await to completion even if the caller is cancelled meanwhile.

    Returns ``(result, was_cancelled)``: a process spawned (or a cgroup created) while the action
    was being cancelled must still be handed back, so it can be killed (removed), before the
    cancellation goes on.
    """
    task = asyncio.ensure_future(awaitable)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled():
                raise
            cancelled = True
    return task.result(), cancelled


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def safe_name(text: str, limit: int = 80) -> str:
    """A file-system / container-name safe rendering of an id."""
    cleaned = _UNSAFE.sub("_", text).strip("._") or "x"
    return cleaned[:limit]


async def supervise(
    process: asyncio.subprocess.Process,
    *,
    dispatch: Dispatch,
    started: float,
    spawn_cancelled: bool,
    kill_leftovers: Callable[[], Awaitable[object]],
    oom_killed: Callable[[], bool],
    pipe_drain_s: float,
) -> ExecOutcome:
    """Run a spawned action to its end, whatever ends it (exit, timeout or cancel), in one way for
    every backend: wait up to the timeout, kill everything the action started, reap the child,
    collect the capped output. A cancel arriving meanwhile is honoured after the cleanup."""
    assert process.stdout is not None
    reader = asyncio.create_task(read_capped(process.stdout, dispatch.output_cap_bytes))
    exit_watch = procs.ExitWatch(process.pid)
    timed_out = False
    cancelled = spawn_cancelled
    try:
        if cancelled:
            raise asyncio.CancelledError
        try:
            await asyncio.wait_for(exit_watch.wait(), dispatch.timeout_s)
        except TimeoutError:
            timed_out = True
    finally:
        exit_watch.close()  # nothing the action started survives it
        (output, truncated, finished), cancelled = await finish_despite_cancel(
            _reap(dispatch, process, reader, kill_leftovers, pipe_drain_s)
        )
    if cancelled:
        raise asyncio.CancelledError
    return ExecOutcome(
        exit_code=process.returncode,
        output=output,
        output_truncated=truncated,
        started_at=started,
        finished_at=finished,
        timed_out=timed_out,
        oom_killed=oom_killed() and not timed_out,
    )


async def _reap(
    dispatch: Dispatch,
    process: asyncio.subprocess.Process,
    reader: asyncio.Task[tuple[bytes, bool]],
    kill_leftovers: Callable[[], Awaitable[object]],
    pipe_drain_s: float,
) -> tuple[bytes, bool, float]:
    """Kill what is left, reap the child, collect the output: (output, truncated, finished).

    The kill is repeated until the child is gone: a process the action starts after a kill
    (a Docker exec that dockerd had not started yet when the timeout fired, a fork racing the
    scan) would otherwise run on, with only the CLI client killed after ``pipe_drain_s``."""
    deadline = time.monotonic() + pipe_drain_s
    while True:
        await kill_leftovers()
        remaining = deadline - time.monotonic()
        try:  # asyncio's wait() also waits for the pipe; the exit status is there regardless
            await asyncio.wait_for(process.wait(), max(0.0, min(_KILL_RETRY_S, remaining)))
            break
        except TimeoutError:
            if time.monotonic() < deadline:
                continue
        logger.error(
            "%s: child (%s) or its pipe outlived the kill", dispatch.key, process.returncode
        )
        if process.returncode is None:
            process.kill()
            await process.wait()
        break
    finished = time.time()
    try:
        output, truncated = await asyncio.wait_for(reader, pipe_drain_s)
    except TimeoutError:
        logger.error("output pipe of %s never closed", dispatch.key)
        return b"", False, finished
    return output, truncated, finished
