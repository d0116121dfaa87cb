"""What the router follows from the control plane by polling Redis (Loom's own): a GET every
``interval_s`` needs nothing re-established after Redis comes back, and a failed poll keeps what
the router already uses."""

from __future__ import annotations

import asyncio
import logging

from workers.cancelling import cancel_and_wait

log = logging.getLogger("loom.router")


class VersionPoller:
    """Subclasses say what they follow (``what``) and how to adopt a new version
    (``refresh``: whether something new was adopted)."""

    what = "stored value"
    interval_s = 1.0
    _task: asyncio.Task[None] | None = None

    async def refresh(self) -> bool:
        raise NotImplementedError

    async def _refresh_logged(self) -> None:
        try:
            await self.refresh()
        except Exception:  # Redis away, a malformed value: keep the current one
            log.exception("%s refresh failed; keeping the current one", self.what)

    async def start(self) -> None:
        await self._refresh_logged()
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        await cancel_and_wait(self._task)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self._refresh_logged()
