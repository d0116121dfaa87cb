"""The faults benchmark's client and its counting (``bench/faults.py`` says what is counted
and why): a submitter that retries batches with their own idempotency keys, an observer of ended
actions per node, and the accounting of lost actions and duplicated runs afterwards."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench._cluster import wait_until

POOL = "cpu"
TERMINAL = ("succeeded", "failed", "cancelled", "timed_out")
ACTION_TIMEOUT_S = 20.0  # each action's own timeout: a hung one ends well within a scenario
SCHEDULER_GAVE_UP = "timeout: no result from"  # workers/scheduler/ledger.py check_deadlines


# --- the client side -------------------------------------------------------------------------


@dataclass
class Ledger:
    """What the client sent and what it was told (thread-safe)."""

    sent: list[str] = field(default_factory=list)
    accepted: dict[str, int] = field(default_factory=dict)
    abandoned: list[str] = field(default_factory=list)
    submit_ok: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    in_flight: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def accept(self, actions: list[Any]) -> None:
        with self.lock:
            self.accepted.update({str(a.idempotency_key): a.id for a in actions})
            self.submit_ok.append(time.monotonic())

    def first_ok_after(self, moment: float) -> float | None:
        with self.lock:
            return next((t for t in self.submit_ok if t > moment), None)


def marker_command(key: str, sleep_s: float, extra: str = "") -> str:
    """Record this run in the working directory, then work (see the module docstring)."""
    return f"set -e; echo {key} >> run-{key}; {extra}sleep {sleep_s:g}"


def action_item(key: str, trajectory: int, command: str, demand: dict[str, Any]) -> dict[str, Any]:
    return {
        "idempotency_key": key,
        "command": command,
        "pool": POOL,
        "demand": demand,
        "trajectory": trajectory,
        "timeout_s": ACTION_TIMEOUT_S,
    }


class Submitter:
    """Submits a batch every ``interval_s`` from a thread of its own until ``stop()``; a batch
    that fails is sent again with the same keys until accepted (or ``give_up_s`` passes)."""

    def __init__(
        self,
        url: str,
        api_key: str,
        make_batch: Callable[[], list[dict[str, Any]]],
        interval_s: float,
        ledger: Ledger,
        give_up_s: float = 120.0,
    ) -> None:
        self.url, self.api_key = url, api_key
        self.make_batch = make_batch
        self.interval_s = interval_s
        self.ledger = ledger
        self.give_up_s = give_up_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.give_up_s + 30)

    async def _main(self) -> None:
        from loom import AsyncClient
        from loom.protocol import RetryPolicy

        retry = RetryPolicy(attempts=3, base_delay_s=0.05, max_delay_s=0.5)
        async with AsyncClient(self.url, self.api_key, timeout_s=20.0, retry=retry) as client:
            while not self._stop.is_set():
                await self._until_accepted(client, self.make_batch())
                await asyncio.sleep(self.interval_s)

    async def _until_accepted(self, client: Any, items: list[dict[str, Any]]) -> None:
        import httpx
        from loom.errors import ApiError, TransientError

        ledger = self.ledger
        keys = [item["idempotency_key"] for item in items]
        with ledger.lock:
            ledger.sent.extend(keys)
        give_up = time.monotonic() + self.give_up_s
        while True:
            ledger.in_flight.set()
            try:
                actions = await client.submit_batch(items)
            except ApiError as exc:
                problem = f"http_{exc.status_code}"
            except TransientError:
                problem = "transient_after_sdk_retries"
            except httpx.HTTPError as exc:
                problem = type(exc).__name__
            else:
                ledger.accept(actions)
                return
            finally:
                ledger.in_flight.clear()
            with ledger.lock:
                ledger.errors[problem] += 1
            if time.monotonic() > give_up:
                with ledger.lock:
                    ledger.abandoned.extend(keys)
                return
            await asyncio.sleep(0.1)


def steady_batches(
    trajectories: list[int], size: int, sleep_s: float, demand: dict[str, Any]
) -> Callable[[], list[dict[str, Any]]]:
    """Batches of ``size`` actions, on the trajectories in turn (so with many trajectories, new
    ones keep arriving and are placed afresh: a node that comes back gets work again)."""
    turn = itertools.cycle(trajectories)

    def make() -> list[dict[str, Any]]:
        items = []
        for _ in range(size):
            key = uuid.uuid4().hex
            command = marker_command(key, sleep_s)
            items.append(action_item(key, next(turn), command, demand))
        return items

    return make


# --- the observer: ended actions per node, from PostgreSQL -------------------------------------


class Observer:
    """Polls PostgreSQL every ``interval_s`` for the job's ended actions per node."""

    def __init__(self, database_url: str, job: int, interval_s: float = 0.05) -> None:
        self.database_url, self.job, self.interval_s = database_url, job, interval_s
        self.samples: list[tuple[float, dict[str, int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Observer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        import psycopg

        query = (
            "SELECT coalesce(n.name, ''), count(*) FROM actions_action a "
            "LEFT JOIN resources_node n ON n.id = a.node_id "
            "WHERE a.job_id = %s AND a.status = ANY(%s) GROUP BY 1"
        )
        connection: Any = None
        while not self._stop.is_set():
            try:
                if connection is None:
                    connection = psycopg.connect(
                        self.database_url, autocommit=True, connect_timeout=1
                    )
                rows = connection.execute(query, (self.job, list(TERMINAL))).fetchall()
                self.samples.append((time.monotonic(), {str(n): int(c) for n, c in rows}))
            except psycopg.Error:
                with suppress(Exception):
                    connection.close()
                connection = None
            self._stop.wait(self.interval_s)
        if connection is not None:
            connection.close()

    def first_end_after(self, moment: float, node: str | None = None) -> float | None:
        """When the first action end recorded after ``moment`` was seen (``node``: on it)."""

        def ended(counts: dict[str, int]) -> int:
            return counts.get(node, 0) if node is not None else sum(counts.values())

        before = [ended(c) for t, c in self.samples if t <= moment]
        baseline = before[-1] if before else 0
        return next((t for t, c in self.samples if t > moment and ended(c) > baseline), None)


# --- accounting -----------------------------------------------------------------------------


def rows_of(database_url: str, job: int) -> list[tuple[str | None, int, str, int, str, str]]:
    import psycopg

    with psycopg.connect(database_url) as connection:
        rows = connection.execute(
            "SELECT a.idempotency_key, a.id, a.status, a.attempts, a.error_reason, "
            "coalesce(n.name, '') FROM actions_action a "
            "LEFT JOIN resources_node n ON n.id = a.node_id WHERE a.job_id = %s",
            (job,),
        ).fetchall()
    return [tuple(r) for r in rows]


def wait_settled(database_url: str, job: int, timeout_s: float) -> float:
    """Until none of the job's actions is live (or ``timeout_s``); returns the seconds waited."""
    started = time.monotonic()

    def settled() -> bool:
        try:
            return all(status in TERMINAL for _, _, status, *_ in rows_of(database_url, job))
        except Exception:
            return False

    wait_until(settled, timeout_s, 0.25)
    return time.monotonic() - started


def count_runs(work_roots: list[Path]) -> Counter[str]:
    """Lines per ``run-<key>`` marker under every agent's work root (see the module docstring)."""
    runs: Counter[str] = Counter()
    for root in work_roots:
        for marker in root.rglob("run-*"):
            with suppress(OSError):
                runs[marker.name[4:]] += len(marker.read_text().splitlines())
    return runs


def account(
    database_url: str, job: int, ledger: Ledger, work_roots: list[Path], timeout_s: float
) -> dict[str, Any]:
    waited = wait_settled(database_url, job, timeout_s)
    rows = rows_of(database_url, job)
    runs = count_runs(work_roots)
    by_key: dict[str, list[tuple[Any, ...]]] = {}
    for row in rows:
        if row[0]:
            by_key.setdefault(row[0], []).append(row)
    missing = [key for key in ledger.accepted if key not in by_key]
    live = [row for row in rows if row[2] not in TERMINAL]
    # Ended by the scheduler's deadline (no result ever reached it): lost all the same, whether
    # the action never ran (its dispatch went nowhere) or ran and its result went missing.
    given_up = [row for row in rows if row[4].startswith(SCHEDULER_GAVE_UP)]
    never_ran = [row for row in given_up if not runs.get(row[0] or "", 0)]
    statuses = Counter(row[2] for row in rows)
    reasons = Counter(row[4].split(":")[0] or "-" for row in rows if row[2] != "succeeded")
    duplicated = sorted(key for key, n in runs.items() if n > 1)
    sent = set(ledger.sent)  # the warm-up action records no run
    succeeded_unrun = [
        r[0] for r in rows if r[0] in sent and r[2] == "succeeded" and not runs.get(r[0], 0)
    ]
    abandoned_unknown = [k for k in ledger.abandoned if k not in by_key]
    return {
        "keys_sent": len(set(ledger.sent)),
        "keys_accepted": len(ledger.accepted),
        "keys_abandoned_by_client": len(ledger.abandoned),
        "abandoned_keys_without_action": len(abandoned_unknown),
        "actions": len(rows),
        "lost": len(missing) + len(live) + len(given_up),
        "lost_missing_action": len(missing),
        "lost_never_ended": len(live),
        "lost_never_ran_then_timed_out": len(never_ran),
        "lost_result_then_timed_out": len(given_up) - len(never_ran),
        "duplicated_runs": len(duplicated),
        "duplicated_examples": duplicated[:5],
        "keys_with_two_actions": sum(1 for v in by_key.values() if len(v) > 1),
        "runs_recorded": sum(runs.values()),
        "succeeded_without_a_recorded_run": len(succeeded_unrun),
        "actions_with_attempts_over_1": sum(1 for r in rows if r[3] > 1),
        "statuses": dict(statuses),
        "not_succeeded_reasons": dict(reasons),
        "settle_wait_s": waited,
        "client_errors": dict(ledger.errors),
    }
