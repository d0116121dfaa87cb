"""ARTOS buffers in the embedded mode: a buffer service in this process, fed from the database.

Production runs ``python -m workers.buffers`` following the definitions the web tier publishes
to Redis, and Celery beat records each buffer's stats as snapshots. The embedded mode has no
Redis and no beat, so :class:`EmbeddedBuffers` does both here: it serves a ``BufferServer`` on
an ``ipc://`` socket under ``VAR_DIR``, points this process's buffer API at it
(``LOOM_BUFFER_SERVICE``, restored on stop), keeps the served buffers equal to the ``Buffer``
rows (the follower's rules: ``workers.buffers.follower.ServedDefinitions``) and records
snapshots, from a thread of its own.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from apps.buffers import dataplane
from apps.buffers.registry import served_definitions
from apps.buffers.services import buffer_snapshots_record
from workers.buffers.follower import ServedDefinitions
from workers.buffers.service import BufferServer

log = logging.getLogger(__name__)

DEFINITIONS_EVERY_S = 1.0  # how soon a buffer declared in the API or admin is served
SNAPSHOT_EVERY_S = 5.0  # as CELERY_BEAT_SCHEDULE's buffers.snapshot


class EmbeddedBuffers:
    def __init__(self, socket_path: Path | None = None) -> None:
        path = socket_path or Path(settings.VAR_DIR) / f"buffers-{os.getpid()}.sock"
        self.address = f"ipc://{path}"
        self._path = path
        self._server: BufferServer | None = None
        self._served: ServedDefinitions | None = None
        self._previous_address: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="loom-buffers", daemon=True)

    def start(self) -> EmbeddedBuffers:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._path.unlink(missing_ok=True)  # a socket a killed demo left behind
        self._server = BufferServer(address=self.address).start()
        self._served = ServedDefinitions(self._server)
        self._previous_address = os.environ.get(dataplane.SERVICE_ENV)
        os.environ[dataplane.SERVICE_ENV] = self.address
        self.sync()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        if self._previous_address is None:
            os.environ.pop(dataplane.SERVICE_ENV, None)
        else:
            os.environ[dataplane.SERVICE_ENV] = self._previous_address
        if self._server is not None:
            self._server.stop()
        self._path.unlink(missing_ok=True)

    def sync(self) -> None:
        """Serve exactly the buffers the database defines now."""
        assert self._served is not None
        self._served.replace_all(served_definitions())

    def _run(self) -> None:
        since_snapshot = 0.0
        while not self._stop.wait(DEFINITIONS_EVERY_S):
            since_snapshot += DEFINITIONS_EVERY_S
            try:
                self.sync()
                if since_snapshot >= SNAPSHOT_EVERY_S:
                    since_snapshot = 0.0
                    buffer_snapshots_record(now=timezone.now())
            except Exception:  # the next round tries again; the demo keeps running
                log.exception("embedded buffers: a round failed")
            finally:
                close_old_connections()
