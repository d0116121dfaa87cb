"""Vacuum and analyze Loom's tables when the PostgreSQL server does not.

Every action is one insert and two or three updates of ``actions_action``. PostgreSQL's autovacuum
removes the dead row versions those updates leave (in the heap and in every index) and refreshes
the planner's statistics. A server run with ``autovacuum = off`` does neither: dead versions pile
up in the indexes the scheduler and the waiters scan, the planner keeps the row counts of an
empty table, and every hot statement costs more with each minute the control plane runs.

So the scheduler process runs a :class:`DatabaseMaintainer`: while the server's autovacuum is off,
it applies autovacuum's own trigger rule (PostgreSQL's default thresholds, documented under
"The Autovacuum Daemon") to the tables of Loom's database and runs ``VACUUM (ANALYZE)`` or
``ANALYZE`` itself. With autovacuum on it only checks, now and then, that it is still on.
Several scheduler processes may run (one per pool): a session advisory lock lets one pass run at a
time. SQLite needs none of this and the maintainer does nothing there.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from django.db import connection

log = logging.getLogger(__name__)

# Taken at random, constant: the advisory lock that lets one maintenance pass run at a time.
ADVISORY_LOCK_KEY = 0x4C6F6F6D_0001
DEFAULT_PERIOD_S = 10.0

Work = Literal["vacuum", "analyze"]


@dataclass(frozen=True)
class Thresholds:
    """Autovacuum's trigger rule: act once changes exceed ``base + scale × live rows``.

    The defaults are PostgreSQL's own (``autovacuum_vacuum_threshold``/``_scale_factor``,
    ``autovacuum_analyze_threshold``/``_scale_factor``).
    """

    vacuum_base: int = 50
    vacuum_scale: float = 0.2
    analyze_base: int = 50
    analyze_scale: float = 0.1


@dataclass(frozen=True)
class TableActivity:
    """One row of ``pg_stat_user_tables``, the counters the rule reads."""

    table: str
    live_rows: int
    dead_rows: int
    modified_since_analyze: int


def work_due(
    tables: Iterable[TableActivity], thresholds: Thresholds = Thresholds()
) -> list[tuple[str, Work]]:
    """The tables past autovacuum's rule and what each needs (a vacuum includes an analyze)."""
    due: list[tuple[str, Work]] = []
    for activity in tables:
        live = max(activity.live_rows, 0)
        if activity.dead_rows > thresholds.vacuum_base + thresholds.vacuum_scale * live:
            due.append((activity.table, "vacuum"))
        elif activity.modified_since_analyze > (
            thresholds.analyze_base + thresholds.analyze_scale * live
        ):
            due.append((activity.table, "analyze"))
    return due


def _table_activity() -> list[TableActivity]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, n_live_tup, n_dead_tup, n_mod_since_analyze "
            "FROM pg_stat_user_tables WHERE schemaname = current_schema()"
        )
        return [TableActivity(*row) for row in cursor.fetchall()]


def server_autovacuum_on() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('autovacuum') = 'on'")
        (on,) = cursor.fetchone() or (True,)
        return bool(on)


def maintain_once(thresholds: Thresholds = Thresholds()) -> list[tuple[str, Work]]:
    """One pass, where the server's autovacuum is off: :func:`vacuum_and_analyze_due`."""
    return vacuum_and_analyze_due(thresholds) if _loom_maintains() else []


def _loom_maintains() -> bool:
    """PostgreSQL whose autovacuum is off: the tables are Loom's to keep."""
    return connection.vendor == "postgresql" and not server_autovacuum_on()


def vacuum_and_analyze_due(thresholds: Thresholds = Thresholds()) -> list[tuple[str, Work]]:
    """Run the vacuums and analyzes due, unless another process holds the pass; returns what
    ran. Needs autocommit (Django's default): ``VACUUM`` cannot run inside a transaction."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [ADVISORY_LOCK_KEY])
        (locked,) = cursor.fetchone() or (False,)
        if not locked:
            return []
        try:
            done = work_due(_table_activity(), thresholds)
            for table, work in done:
                quoted = connection.ops.quote_name(table)
                statement = "VACUUM (ANALYZE)" if work == "vacuum" else "ANALYZE"
                cursor.execute(f"{statement} {quoted}")
            return done
        finally:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [ADVISORY_LOCK_KEY])


class DatabaseMaintainer:
    """A daemon thread running :func:`maintain_once` every ``period_s`` seconds."""

    def __init__(self, period_s: float = DEFAULT_PERIOD_S) -> None:
        self.period_s = period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="db-maintenance", daemon=True)

    def start(self) -> DatabaseMaintainer:
        if connection.vendor == "postgresql":
            self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        warned = False
        while not self._stop.wait(self.period_s):
            try:
                if not _loom_maintains():
                    continue
                if not warned:
                    log.warning(
                        "PostgreSQL runs with autovacuum off: Loom vacuums and analyzes its own "
                        "tables (controlplane.db_maintenance)"
                    )
                    warned = True
                for table, work in vacuum_and_analyze_due():
                    log.info("db maintenance: %s %s", work, table)
            except Exception:  # never takes the scheduler down: the next period retries
                log.exception("db maintenance pass failed")
            finally:
                connection.close()
