"""Faults with real processes: does Loom lose or double actions when a piece of it dies?

Every scenario runs the real processes of a cluster (``bench/_cluster.py``): uvicorn web,
``manage.py run_scheduler``, ``python -m workers.agents.cpu`` agents (local backend), on a
PostgreSQL cluster and a ``redis-server`` of this run's own (free loopback ports; the shared
servers are never touched), a fresh database and stream prefix per scenario. A client — the SDK,
``loom.AsyncClient`` — submits batches of non-idempotent actions (no tool, so never marked
idempotent) with idempotency keys of its own; a batch that fails (after the SDK's own retries)
is sent again with the same keys until it is accepted. Then one fault:

1. ``web_kill``: SIGKILL of the web process while a batch request is on the wire, restarted at
   once (as a supervisor would).
2. ``redis_restart``: SIGKILL of Redis, restarted empty after ``down_s`` (deploy/ runs Redis
   without persistence: streams, consumer groups and pending entries are gone).
3. ``postgres_restart``: ``pg_ctl stop -m immediate`` (a crash: WAL replay on start), started
   again after ``down_s``.
4. ``agent_cut``: one of two agents reaches Redis through a loopback TCP proxy; the proxy resets
   its connections and refuses new ones for ``cut_s``, then lets it back. Longer than the
   scheduler's heartbeat timeout, so the scheduler declares the node lost meanwhile.
5. ``disk_full``: the agent's work root is a 2 MiB tmpfs; the benchmark fills it, actions that
   write there run, then the space is freed.

Counted afterwards, from the system of record and from the actions' own side:

- **lost**: a key the server accepted that has no action; an action that has not ended when
  every live action should have (its timeout plus the scheduler's result grace, plus margin); or
  one the scheduler ended because no result ever reached it (``timeout: no result from …``),
  whether it never ran (its dispatch went nowhere) or ran and its result went missing.
- **duplicated runs**: how often each action's command really ran. Actions are sandboxed (they
  see only their trajectory's working directory), so nothing outside can count for them; each
  action's command appends one line to ``run-<its idempotency key>`` in its working directory,
  which is its trajectory's directory on that node and stays between the trajectory's actions.
  The benchmark (outside the sandbox) reads every agent's work root afterwards, before any agent
  stops (a stopping agent removes its trajectories' directories): a file with two lines is an
  action that ran twice, whichever node or attempt ran it. Cross-checked with the ``attempts``
  column and with two actions under one key (the database forbids it).
- **recovery**: from the fault to the first sign that the system serves again after it — the
  first accepted submit (web), the first action end recorded in PostgreSQL after the server came
  back (Redis, PostgreSQL), the first end of an action on the cut node after its link came back
  (agent; also reported from the cut), the first successful action after the space was freed
  (disk). An observer thread polls PostgreSQL every 50 ms for ended actions per node.

How every action ended (status and reason) is reported too: "ended" is not always "succeeded".
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import subprocess
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._cluster import Cluster, PostgresServer, RedisServer, TcpProxy, wait_until
from bench._execution import Unavailable
from bench._faults_client import (
    ACTION_TIMEOUT_S,
    POOL,
    Ledger,
    Observer,
    Submitter,
    account,
    action_item,
    marker_command,
    rows_of,
    steady_batches,
)
from bench.report import BenchReport, Target

RESULT_GRACE_S = 30.0  # the scheduler's default (run_scheduler --result-grace)
SETTLE_S = ACTION_TIMEOUT_S + RESULT_GRACE_S + 15.0  # every live action has ended by then
MID_BATCH_TRIES = 200  # attempts to land a web kill inside a batch request

# --- scenarios ------------------------------------------------------------------------------


@dataclass
class Servers:
    scratch: Path
    postgres: PostgresServer
    redis: RedisServer


@contextmanager
def _cluster(servers: Servers, name: str, trajectories: int) -> Iterator[tuple[Cluster, dict]]:
    log_dir = servers.scratch / name / "logs"
    log_dir.mkdir(parents=True)
    with servers.postgres.database(name) as database:
        prefix = f"faults-{name}-{uuid.uuid4().hex[:6]}"
        cluster = Cluster(log_dir, database, servers.redis.url(), prefix)
        seeded = cluster.seed(POOL, trajectories)
        try:
            yield cluster, seeded
        except Exception as exc:
            raise RuntimeError(f"{name}: {exc}\n{cluster.logs()}") from exc
        finally:
            cluster.stop_all()


def _warm(cluster: Cluster, api_key: str, trajectory: int, timeout_s: float = 60.0) -> None:
    """One action end to end: web, scheduler and agents are up."""
    from loom import AsyncClient

    async def once() -> None:
        async with AsyncClient(cluster.url, api_key, timeout_s=timeout_s) as client:
            done = await client.run(
                command="true", pool=POOL, demand={"memory_mb": 1}, trajectory=trajectory,
                timeout=timeout_s,
            )  # fmt: skip
            assert done.status == "succeeded", done

    try:
        asyncio.run(once())
    except Exception as exc:
        raise RuntimeError(f"the cluster did not run a first action: {exc!r}") from exc


def _start(cluster: Cluster, work: Path, *, redis_url: str | None = None) -> None:
    """Web, scheduler and agent ``node-a`` (reaching Redis through ``redis_url`` if given)."""
    cluster.start_web()
    cluster.start_scheduler(POOL)
    cluster.start_agent(POOL, "node-a", work, redis_url=redis_url)


def _steady_load(
    cluster: Cluster, seeded: dict[str, Any], size: dict[str, Any], trajectories: list[int]
) -> tuple[Ledger, Submitter]:
    """Once a first action ran end to end: a submitter of steady batches (not started yet)."""
    _warm(cluster, seeded["key"], seeded["trajectories"][0])
    ledger = Ledger()
    batches = steady_batches(trajectories, size["batch"], size["sleep_s"], {"memory_mb": 1})
    return ledger, Submitter(cluster.url, seeded["key"], batches, size["interval_s"], ledger)


def _since(moment: float | None, origin: float) -> float | None:
    return None if moment is None else moment - origin


def scenario_web_kill(servers: Servers, size: dict[str, Any]) -> dict[str, Any]:
    name = "web_kill"
    work = servers.scratch / name / "work"
    with _cluster(servers, name, 8) as (cluster, seeded):
        _start(cluster, work)
        ledger, submitter = _steady_load(cluster, seeded, size, seeded["trajectories"])
        kills: list[dict[str, Any]] = []
        with Observer(cluster.database_url, seeded["job"]) as observer:
            submitter.start()
            for _ in range(size["kills"]):
                time.sleep(size["between_s"])
                # a random moment inside a batch request: a request that ended during the
                # jitter (a quiet machine answers one in milliseconds) is passed over for the next
                for _ in range(MID_BATCH_TRIES):
                    if not ledger.in_flight.wait(10):
                        raise RuntimeError("no batch request in flight to kill the web under")
                    time.sleep(random.uniform(0.0, 0.02))
                    if ledger.in_flight.is_set():
                        break
                mid_batch = ledger.in_flight.is_set()
                fault = time.monotonic()
                cluster.kill_web()
                cluster.start_web(wait=False)
                wait_until(lambda f=fault: ledger.first_ok_after(f) is not None, 90)
                kills.append({"at": fault, "mid_batch": mid_batch})
            time.sleep(size["between_s"])
            submitter.stop()
            result = account(cluster.database_url, seeded["job"], ledger, [work], SETTLE_S)
            for kill in kills:
                fault = kill.pop("at")
                kill["recovery_s"] = _since(ledger.first_ok_after(fault), fault)
                kill["first_action_end_after_s"] = _since(observer.first_end_after(fault), fault)
        recoveries = [k["recovery_s"] for k in kills]
        result |= {
            "kills": kills,
            "recovery_s": max(recoveries) if None not in recoveries else None,
        }
        return result


def _one_server_fault(
    servers: Servers,
    size: dict[str, Any],
    name: str,
    fault: Callable[[], None],
    restore: Callable[[], None],
) -> dict[str, Any]:
    """Steady load; ``fault()``; ``down_s``; ``restore()``; load goes on; then count."""
    work = servers.scratch / name / "work"
    with _cluster(servers, name, 8) as (cluster, seeded):
        _start(cluster, work)
        ledger, submitter = _steady_load(cluster, seeded, size, seeded["trajectories"])
        with Observer(cluster.database_url, seeded["job"]) as observer:
            submitter.start()
            time.sleep(size["before_s"])
            fault_at = time.monotonic()
            fault()
            time.sleep(size["down_s"])
            restore()
            restored_at = time.monotonic()
            wait_until(lambda: observer.first_end_after(restored_at) is not None, 90)
            time.sleep(size["after_s"])
            submitter.stop()
            result = account(cluster.database_url, seeded["job"], ledger, [work], SETTLE_S)
            cluster.check_alive()
        result |= {
            "down_s": size["down_s"],
            "recovery_s": _since(observer.first_end_after(restored_at), fault_at),
            "first_submit_ok_after_s": _since(ledger.first_ok_after(restored_at), fault_at),
        }
        return result


def scenario_redis_restart(servers: Servers, size: dict[str, Any]) -> dict[str, Any]:
    redis = servers.redis
    return _one_server_fault(servers, size, "redis_restart", redis.kill, redis.start)


def scenario_postgres_restart(servers: Servers, size: dict[str, Any]) -> dict[str, Any]:
    postgres = servers.postgres
    return _one_server_fault(
        servers, size, "postgres_restart", lambda: postgres.stop("immediate"), postgres.start
    )


def scenario_agent_cut(servers: Servers, size: dict[str, Any]) -> dict[str, Any]:
    """Two agents; node-a talks to Redis through the proxy. Every batch goes to trajectories
    not used before (a trajectory stays on its node), so both nodes get new work throughout."""
    name = "agent_cut"
    roots = [servers.scratch / name / "work-a", servers.scratch / name / "work-b"]
    proxy = TcpProxy(servers.redis.port)
    try:
        phases_s = size["before_s"] + size["cut_s"] + size["after_s"] + 5
        trajectories = int(size["batch"] * phases_s / size["interval_s"])
        with _cluster(servers, name, trajectories) as (cluster, seeded):
            _start(cluster, roots[0], redis_url=proxy.url())
            cluster.start_agent(POOL, "node-b", roots[1])
            ledger, submitter = _steady_load(cluster, seeded, size, seeded["trajectories"][1:])
            with Observer(cluster.database_url, seeded["job"]) as observer:
                submitter.start()
                time.sleep(size["before_s"])
                running_on_a = _running_on(cluster.database_url, seeded["job"], "node-a")
                cut_at = time.monotonic()
                proxy.cut()
                time.sleep(size["cut_s"])
                proxy.restore()
                restored_at = time.monotonic()
                wait_until(lambda: observer.first_end_after(restored_at, "node-a") is not None, 60)
                time.sleep(size["after_s"])
                submitter.stop()
                result = account(cluster.database_url, seeded["job"], ledger, roots, SETTLE_S)
                cluster.check_alive()
            back = observer.first_end_after(restored_at, "node-a")
            result |= {
                "cut_s": size["cut_s"],
                "running_on_cut_node_at_cut": running_on_a,
                "recovery_s": _since(back, restored_at),
                "recovery_from_cut_s": _since(back, cut_at),
                "pool_first_end_after_cut_s": _since(observer.first_end_after(cut_at), cut_at),
            }
            return result
    finally:
        proxy.close()


def _running_on(database_url: str, job: int, node: str) -> int:
    return sum(1 for r in rows_of(database_url, job) if r[5] == node and r[2] == "running")


def _mount_tmpfs(path: Path, size: str) -> str | None:
    """Mount a size-limited tmpfs at ``path``; the reason it cannot be done, or None."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        completed = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"mount -t tmpfs failed: {exc}"
    if completed.returncode != 0:
        return f"mount -t tmpfs failed: {completed.stderr.strip() or completed.returncode}"
    return None


def _fill(directory: Path) -> Path:
    """Write zeros into ``directory`` until the file system is full."""
    filler = directory / "filler"
    chunk = b"\0" * 65536
    with suppress(OSError), filler.open("wb") as out:
        while True:
            out.write(chunk)
            out.flush()
    return filler


def scenario_disk_full(servers: Servers, size: dict[str, Any]) -> dict[str, Any]:
    """The agent's work root on a 2 MiB tmpfs: fill it, run actions that write there, free it."""
    from loom import AsyncClient

    name = "disk_full"
    work = servers.scratch / name / "work"
    reason = _mount_tmpfs(work, "2m")
    if reason is not None:
        return {"skipped": reason}
    try:
        with _cluster(servers, name, size["batch"] * 2 + 1) as (cluster, seeded):
            cluster.start_web()
            cluster.start_scheduler(POOL)
            cluster.start_agent(POOL, "node-a", work)
            trajectories = seeded["trajectories"]
            _warm(cluster, seeded["key"], trajectories[0])
            ledger = Ledger()
            write = "head -c 262144 /dev/zero > blob; rm blob; "

            def batch(trajectory_ids: list[int]) -> list[dict[str, Any]]:
                items = []
                for trajectory in trajectory_ids:
                    key = uuid.uuid4().hex
                    command = marker_command(key, 0.1, extra=write)
                    items.append(action_item(key, trajectory, command, {"memory_mb": 1}))
                with ledger.lock:
                    ledger.sent.extend(item["idempotency_key"] for item in items)
                return items

            async def run_batch(items: list[dict[str, Any]]) -> tuple[list[Any], float]:
                started = time.monotonic()
                async with AsyncClient(cluster.url, seeded["key"], timeout_s=30) as client:
                    actions = await client.submit_batch(items)
                    ledger.accept(actions)
                    ended = [
                        a
                        async for a in client.as_completed(
                            [a.id for a in actions], timeout=SETTLE_S
                        )
                    ]
                return ended, time.monotonic() - started

            with Observer(cluster.database_url, seeded["job"]):
                before, _ = asyncio.run(run_batch(batch(trajectories[1 : 1 + size["batch"]])))
                filler = _fill(work)
                fault_at = time.monotonic()
                # Half the trajectories already have a directory, half get theirs on a full disk.
                full_trajectories = (
                    trajectories[1 : 1 + 2 * size["batch"] : 2]
                    + trajectories[1 + size["batch"] : 1 + size["batch"] + size["batch"] // 2]
                )
                during, during_s = asyncio.run(run_batch(batch(full_trajectories)))
                filler.unlink()
                freed_at = time.monotonic()
                first_ok: float | None = None
                deadline = freed_at + 60
                while first_ok is None and time.monotonic() < deadline:
                    one, _ = asyncio.run(run_batch(batch(trajectories[1:2])))
                    if one and one[0].status == "succeeded":
                        first_ok = time.monotonic()
                after, _ = asyncio.run(run_batch(batch(trajectories[1 : 1 + size["batch"]])))
                result = account(cluster.database_url, seeded["job"], ledger, [work], SETTLE_S)
            result |= {
                "before_fill": dict(Counter(a.status for a in before)),
                "while_full": dict(Counter(a.status for a in during)),
                "while_full_reasons": dict(Counter(a.error_reason for a in during)),
                "while_full_output_example": next(
                    (a.output[-200:] for a in during if a.status != "succeeded"), ""
                ),
                "while_full_batch_s": during_s,
                "while_full_all_failed_with_reason": all(
                    a.status == "failed" and a.error_reason for a in during
                ),
                "after_free": dict(Counter(a.status for a in after)),
                "recovery_s": _since(first_ok, freed_at),
                "recovery_from_fill_s": _since(first_ok, fault_at),
            }
            return result
    finally:
        subprocess.run(["umount", "-l", str(work)], capture_output=True, check=False)


SCENARIOS: dict[str, Callable[[Servers, dict[str, Any]], dict[str, Any]]] = {
    "web_kill": scenario_web_kill,
    "redis_restart": scenario_redis_restart,
    "postgres_restart": scenario_postgres_restart,
    "agent_cut": scenario_agent_cut,
    "disk_full": scenario_disk_full,
}


# Settings changed after a run, kept with what that run showed (quick runs, same machine).
EARLIER_SETTINGS = {
    "web_kill": {
        "setting": {"batch": 200, "interval_s": 0.05, "sleep_s": 0.2},
        "why_changed": "more shell processes than 2 cores can start: actions hit their own "
        "20 s timeout, which measures the machine, not the fault",
        "seen": {"lost": 0, "duplicated_runs": 0, "timed_out_by_their_own_timeout": 2134},
    },
    "agent_cut": {
        "setting": {"trajectories": 16, "demand": {"memory_mb": 16}, "node_memory_mb": 256},
        "why_changed": "a trajectory stays on its node: once the cut node was lost, all 16 "
        "moved to the other node and the cut node never got work again, so its recovery "
        "could not be measured; now every batch brings new trajectories",
        "seen": {"lost": 0, "duplicated_runs": 60, "recovery_s": None},
    },
    "redis_restart": {
        "setting": "unchanged; run before the fixes in workers/transport/redis_streams.py "
        "(consumer group created again) and workers/agents/common/agent.py (result re-sent)",
        "seen": {"lost_never_ran_then_timed_out": 460, "of_actions": 700, "duplicated_runs": 0},
    },
}


def sizes(quick: bool) -> dict[str, dict[str, Any]]:
    steady = {"batch": 20, "interval_s": 0.2, "sleep_s": 1.0}
    if quick:
        return {
            "web_kill": {"batch": 40, "interval_s": 0.3, "sleep_s": 0.2, "kills": 1,
                         "between_s": 3.0},
            "redis_restart": steady | {"before_s": 3.0, "down_s": 1.0, "after_s": 4.0},
            "postgres_restart": steady | {"before_s": 3.0, "down_s": 2.0, "after_s": 4.0},
            "agent_cut": {"batch": 4, "interval_s": 0.5, "sleep_s": 3.0, "before_s": 4.0,
                          "cut_s": 20.0, "after_s": 5.0},
            "disk_full": {"batch": 6},
        }  # fmt: skip
    return {
        "web_kill": {"batch": 40, "interval_s": 0.3, "sleep_s": 0.2, "kills": 3,
                     "between_s": 5.0},
        "redis_restart": steady | {"before_s": 5.0, "down_s": 2.0, "after_s": 10.0},
        "postgres_restart": steady | {"before_s": 5.0, "down_s": 5.0, "after_s": 10.0},
        "agent_cut": {"batch": 4, "interval_s": 0.5, "sleep_s": 3.0, "before_s": 6.0,
                      "cut_s": 30.0, "after_s": 10.0},
        "disk_full": {"batch": 20},
    }  # fmt: skip


@contextmanager
def servers() -> Iterator[Servers]:
    """This run's own PostgreSQL and Redis; ``LOOM_BENCH_KEEP=1`` keeps the logs and work dirs."""
    scratch = Path(tempfile.mkdtemp(prefix="loom-faults-"))
    try:
        with PostgresServer.started(scratch) as postgres, RedisServer.started(scratch) as redis:
            yield Servers(scratch, postgres, redis)
    finally:
        if os.environ.get("LOOM_BENCH_KEEP"):
            print(f"faults: kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


def measure(only: list[str] | None = None, quick: bool = True) -> dict[str, Any]:
    """Run the scenarios (``only``: a subset, by name) on servers of this run's own."""
    chosen = only or list(SCENARIOS)
    plan = sizes(quick)
    results: dict[str, Any] = {}
    with servers() as running:
        for name in chosen:
            started = time.monotonic()
            results[name] = SCENARIOS[name](running, plan[name])
            results[name]["scenario_wall_s"] = time.monotonic() - started
    return results


def run(quick: bool) -> BenchReport:
    report = BenchReport(
        benchmark="faults",
        quick=quick,
        params={
            "sizes": sizes(quick),
            "action_timeout_s": ACTION_TIMEOUT_S,
            "scheduler": "run_scheduler defaults (heartbeat timeout 15 s, result grace 30 s, "
            "3 attempts)",
            "agents": "python -m workers.agents.cpu, local backend, heartbeat 0.5 s",
            "redis": "own redis-server, no persistence (as deploy/docker-compose.yml)",
            "postgres": "own initdb cluster, fsync off, stopped with -m immediate",
            "actions": "non-idempotent shell commands (no tool), each recording its runs in "
            "its trajectory's working directory",
            "earlier_settings": EARLIER_SETTINGS,
        },
    )
    try:
        results = measure(quick=quick)
    except Unavailable as exc:
        return report.skip(exc)
    report.series = results
    for name, result in results.items():
        if "skipped" in result:
            continue
        report.targets.append(Target.at_most(f"{name}_lost_actions", result["lost"], 0))
        report.targets.append(
            Target.at_most(f"{name}_duplicated_runs", result["duplicated_runs"], 0)
        )
        recovered = result.get("recovery_s") is not None
        report.targets.append(Target.is_true(f"{name}_served_again", recovered))
    return report
