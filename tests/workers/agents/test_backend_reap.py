"""The one way every CPU backend ends an action (``workers.agents.cpu.backend.supervise``): after a
timeout it kills the leftovers again until the child is gone, so a process the action starts
after the first kill (a Docker exec dockerd had not started yet) does not run on."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from tests.workers.agents.conftest import cpu_dispatch
from workers.agents.cpu.backend import ExecOutcome, supervise

Killer = Callable[[asyncio.subprocess.Process], Callable[[], Awaitable[None]]]


async def _supervised(
    argv: tuple[str, ...], timeout_s: float, killer: Killer, kills: list[float]
) -> tuple[asyncio.subprocess.Process, ExecOutcome]:
    """Run ``argv`` as an action; ``killer(process)`` is its kill of leftovers, each call of it
    recorded in ``kills``."""
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    kill = killer(process)

    async def kill_leftovers() -> None:
        kills.append(time.monotonic())
        await kill()

    outcome = await supervise(
        process,
        dispatch=cpu_dispatch(argv[0], " ".join(argv), timeout_s=timeout_s),
        started=time.time(),
        spawn_cancelled=False,
        kill_leftovers=kill_leftovers,
        oom_killed=lambda: False,
        pipe_drain_s=10.0,
    )
    return process, outcome


async def test_a_timeout_kills_again_until_the_child_is_gone() -> None:
    kills: list[float] = []

    def finds_it_from_the_second_kill(
        process: asyncio.subprocess.Process,
    ) -> Callable[[], Awaitable[None]]:
        async def kill() -> None:  # the first kill finds nothing (the process was not there yet)
            if len(kills) > 1 and process.returncode is None:
                process.kill()

        return kill

    started = time.monotonic()
    process, outcome = await _supervised(("sleep", "30"), 0.2, finds_it_from_the_second_kill, kills)
    assert outcome.timed_out
    assert len(kills) >= 2  # killed again, not left to the drain timeout
    assert time.monotonic() - started < 5  # well before the 10 s drain timeout
    assert process.returncode is not None


async def test_an_exit_needs_one_kill_of_the_leftovers() -> None:
    kills: list[float] = []

    def finds_nothing(process: asyncio.subprocess.Process) -> Callable[[], Awaitable[None]]:
        async def kill() -> None:
            return None

        return kill

    _, outcome = await _supervised(("true",), 10.0, finds_nothing, kills)
    assert (outcome.timed_out, outcome.exit_code) == (False, 0)
    assert len(kills) == 1
