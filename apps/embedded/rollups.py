"""Rollups in the embedded mode, where Celery is eager and no beat process runs.

``manage.py demo`` starts one :class:`RollupThread`; production runs ``celery beat`` with
``CELERY_BEAT_SCHEDULE``'s ``metrics.rollup`` instead.
"""

from __future__ import annotations

import logging
import threading

from django.db import close_old_connections

from apps.metrics.services import DEFAULT_BUCKET_S, rollup_write

logger = logging.getLogger(__name__)


class RollupThread(threading.Thread):
    """Writes a rollup every ``bucket_s`` seconds until :meth:`stop`."""

    def __init__(self, bucket_s: int = DEFAULT_BUCKET_S) -> None:
        super().__init__(name="loom-rollups", daemon=True)
        self.bucket_s = bucket_s
        self._stop_event = threading.Event()
        self.written = 0

    def stop(self, timeout: float = 5.0) -> None:
        self._stop_event.set()
        self.join(timeout)

    def run(self) -> None:
        while not self._stop_event.wait(self.bucket_s):
            try:
                rollup_write(bucket_s=self.bucket_s)
                self.written += 1
            except Exception:  # keep the history going; one failed bucket is logged
                logger.exception("rollup failed")
            finally:
                close_old_connections()
