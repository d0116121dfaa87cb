"""Threads of one's own for blocking calls made from an event loop.

The loop's default executor is shared by everything in the process; whoever fills it (an
embedded demo waiting on its actions, say) would stall a scheduler's persistence or an agent's
cgroup work queued behind it. Components that must always make progress run their blocking calls
here instead.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class OwnThreads:
    """A lazily started pool of ``size`` threads; ``close()`` lets it start again on next use."""

    def __init__(self, size: int, name: str) -> None:
        self.size = size
        self.name = name
        self._executor: ThreadPoolExecutor | None = None

    async def run(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.size, thread_name_prefix=self.name)
        call = functools.partial(function, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None
