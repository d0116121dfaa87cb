"""Stopping background asyncio tasks: cancel until they have ended, not once.

A task cancelled once may carry on. Python 3.11's ``asyncio.wait_for`` returns its inner
awaitable's result when a cancellation lands in the same loop turn as that awaitable completes,
and the cancellation is lost. redis-py wraps the send of every command in ``wait_for`` (its
default socket timeout), so any task cancelled while it sends a Redis command (a poll, the
state publisher's flush, the auth-changed subscription, a request looking up its key) can
swallow the cancel and loop on, and whoever awaits it after one ``cancel()`` waits forever.
Every stop that cancels a task and then awaits it without a bound goes through here (the
router's pollers and servers, the scheduler service's housekeeping, the embedded runtime).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

# How long a cancelled task gets to end (its own clean-up included) before it is cancelled again:
# only a task that lost the cancellation waits that long.
RETRY_S = 0.1


async def cancel_and_wait(task: asyncio.Future[Any] | None) -> None:
    """Cancel ``task`` until it has ended; an exception it ended with (other than its
    cancellation) is raised here."""
    if task is None:
        return
    await cancel_all_and_wait((task,))
    if not task.cancelled():
        task.result()


async def cancel_all_and_wait(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Cancel every task until all have ended; what they ended with is left to the caller."""
    pending = {task for task in tasks if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=RETRY_S)
