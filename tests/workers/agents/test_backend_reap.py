"""The one way every CPU backend ends an action (``workers.agents.cpu.backend.supervise``): after a
timeout it kills the leftovers again until the child is gone, so a process the action starts
after the first kill (a Docker exec dockerd had not started yet) does not run on."""

from __future__ import annotations

import asyncio
import time

from tests.workers.agents.conftest import cpu_dispatch
from workers.agents.cpu.backend import supervise


async def test_a_timeout_kills_again_until_the_child_is_gone() -> None:
    process = await asyncio.create_subprocess_exec(
        "sleep", "30", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    kills: list[float] = []

    async def kill_leftovers() -> None:
        # The first kill finds nothing (the process was not there yet); later ones find it.
        kills.append(time.monotonic())
        if len(kills) > 1 and process.returncode is None:
            process.kill()

    started = time.monotonic()
    outcome = await supervise(
        process,
        dispatch=cpu_dispatch("late", "sleep 30", timeout_s=0.2),
        started=time.time(),
        spawn_cancelled=False,
        kill_leftovers=kill_leftovers,
        oom_killed=lambda: False,
        pipe_drain_s=10.0,
    )
    assert outcome.timed_out
    assert len(kills) >= 2  # killed again, not left to the drain timeout
    assert time.monotonic() - started < 5  # well before the 10 s drain timeout
    assert process.returncode is not None


async def test_an_exit_needs_one_kill_of_the_leftovers() -> None:
    process = await asyncio.create_subprocess_exec(
        "true", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    kills: list[float] = []

    async def kill_leftovers() -> None:
        kills.append(time.monotonic())

    outcome = await supervise(
        process,
        dispatch=cpu_dispatch("quick", "true", timeout_s=10.0),
        started=time.time(),
        spawn_cancelled=False,
        kill_leftovers=kill_leftovers,
        oom_killed=lambda: False,
        pipe_drain_s=10.0,
    )
    assert (outcome.timed_out, outcome.exit_code) == (False, 0)
    assert len(kills) == 1
