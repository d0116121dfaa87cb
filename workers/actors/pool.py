"""Elastic actors on one node (artos §4.3): started on demand from a zygote, checkpointed after
sampling, restored on the next invocation, pinned to cores, optionally pre-warmed.

``ActorPool`` is the node's process manager. It starts one zygote (a fresh interpreter that
prepared the program once), then per invocation asks it to fork the actor. An actor holds CPU
only while it samples: between invocations it is a checkpoint file, so the actor count can change
from one iteration to the next at no restart cost (register more actors, invoke the ones needed).
A pre-warmed actor is forked and restored ahead of time and waits for ``go``; the workload
monitor decides when (``workers.actors.prewarm``).

An actor killed mid-sample ends its invocation with a non-zero code; ``run_iteration`` then
discards or keeps its partial data (``drop_actor`` on the buffer) and invokes it again, so the
iteration completes.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from workers.actors.fork_start import ForkedZygote, fork_safe, fork_zygote
from workers.actors.zygote import zygote_environment
from workers.agents.common.sysinfo import numa_layout, usable_cores

MAX_PACKET = 1 << 16
START_METHODS = ("spawn", "fork")
MAX_NICENESS = 19  # the lowest priority Linux has


class ActorPoolError(RuntimeError):
    """The pool cannot do what was asked; the message names the actor or the part."""


class ActorState(StrEnum):
    CHECKPOINTED = "checkpointed"  # no process; its state is on disk (or not yet created)
    PREWARMING = "prewarming"  # forked, restoring
    WARM = "warm"  # restored, waiting for go
    RUNNING = "running"  # sampling
    FAILED = "failed"


@dataclass
class Invocation:
    """One invocation's outcome, with its start-up wait (what pre-warming hides)."""

    actor: str
    code: int | None = None
    startup_wait_s: float | None = None
    restored: bool = False
    restore_s: float | None = None
    sampled: bool = False
    error: str | None = None
    invoked_at: float = 0.0
    requested_at: float = 0.0  # when the fork was asked for (the prewarm, or the invocation)
    ready_at: float | None = None
    sampled_at: float | None = None
    finished_at: float | None = None
    prewarmed: bool = False
    cores: tuple[int, ...] = ()
    niceness: int | None = None  # the actor process's, as it reported when ready


@dataclass
class ActorRecord:
    name: str
    cores: tuple[int, ...]
    state: ActorState = ActorState.CHECKPOINTED
    pid: int | None = None
    steps_done: int = 0
    invocations: int = 0
    current: Invocation | None = None
    history: list[Invocation] = field(default_factory=list)


def assign_cores(
    actors: Sequence[str], cores_each: int, cores: Sequence[int] | None = None
) -> dict[str, tuple[int, ...]]:
    """Pin actors to cores NUMA node by node; more actors than cores share them in turn."""
    available = list(cores) if cores is not None else usable_cores()
    if cores_each < 1 or cores_each > len(available):
        raise ActorPoolError(f"cores_each: {cores_each} not within 1..{len(available)} cores")
    groups: list[tuple[int, ...]] = []
    for node_cores in numa_layout(available).values():
        for start in range(0, len(node_cores) - cores_each + 1, cores_each):
            groups.append(tuple(node_cores[start : start + cores_each]))
    if not groups:  # no NUMA node holds cores_each alone: spread
        groups = [tuple(available[:cores_each])]
    return {actor: groups[index % len(groups)] for index, actor in enumerate(actors)}


class ActorPool:
    """Zygote-backed elastic actors for one program on this node."""

    def __init__(
        self,
        program: str,
        actors: Sequence[str],
        checkpoint_dir: str | Path,
        steps: int,
        sink: dict[str, Any] | None = None,
        params: dict[str, Any] | None = None,
        cores_each: int = 1,
        cores: Sequence[int] | None = None,
        seed: int = 0,
        keep_warm_s: float = 0.0,
        start_method: str = "spawn",
        niceness: int = 0,
    ) -> None:
        """``keep_warm_s``: after its checkpoint an actor's process stays parked this long
        (no CPU, its state in memory) and serves the next invocation without a fork; 0
        ends it at every checkpoint. ``start_method``: the zygote is a fresh interpreter
        (``spawn``) or a fork of this process (``fork``, ``workers.actors.fork_start``:
        the modules this process imported come for free; a fresh interpreter where forking
        is not safe). ``started_by`` says which it was. ``niceness``: the actors' scheduling
        niceness (0..19, never below the zygote's): above 0, the job's learner (and the
        node's other work) gets most of a core it shares with a running actor."""
        if start_method not in START_METHODS:
            raise ActorPoolError(
                f"start_method: expected one of {', '.join(START_METHODS)}, got {start_method!r}"
            )
        self.start_method = start_method
        self.started_by: str | None = None
        if not keep_warm_s >= 0:
            raise ActorPoolError(f"keep_warm_s: expected seconds >= 0, got {keep_warm_s!r}")
        self.keep_warm_s = float(keep_warm_s)
        integer = isinstance(niceness, int) and not isinstance(niceness, bool)
        if not integer or not 0 <= niceness <= MAX_NICENESS:
            raise ActorPoolError(
                f"niceness: expected an integer 0..{MAX_NICENESS}, got {niceness!r}"
            )
        self.niceness = niceness
        if not actors or len(set(actors)) != len(actors):
            raise ActorPoolError(f"actors: expected distinct names, got {list(actors)!r}")
        if steps < 1:
            raise ActorPoolError(f"steps: expected a positive integer, got {steps}")
        self.program, self.steps, self.seed = program, steps, seed
        self.checkpoint_dir = Path(checkpoint_dir)
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        self.sink, self.params = sink, params
        self.records = {
            name: ActorRecord(name, pinned)
            for name, pinned in assign_cores(actors, cores_each, cores).items()
        }
        self._lock = threading.Condition()
        self._process: subprocess.Popen[bytes] | ForkedZygote | None = None
        self._socket: socket.socket | None = None
        self._reader: threading.Thread | None = None
        self.prepare_s: float | None = None
        self.listeners: list[Callable[[dict[str, Any]], None]] = []

    # -- life cycle ---------------------------------------------------------------------------
    def start(self, timeout_s: float = 120.0) -> float:
        """Start the zygote and wait until it prepared the program; returns its prepare time."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        if self.start_method == "fork" and fork_safe():
            self._process, self.started_by = fork_zygote(self.program, theirs, ours), "fork"
        else:
            command = [sys.executable, "-m", "workers.actors.zygote", "--program", self.program]
            command += ["--fd", str(theirs.fileno())]
            self._process = subprocess.Popen(
                command, pass_fds=[theirs.fileno()], cwd=_repo_root(), env=zygote_environment()
            )
            self.started_by = "spawn"
        theirs.close()
        self._socket = ours
        self._reader = threading.Thread(target=self._read, name="actor-pool", daemon=True)
        self._reader.start()
        with self._lock:
            if not self._lock.wait_for(lambda: self.prepare_s is not None, timeout_s):
                self.close()
                raise ActorPoolError(f"program: zygote for {self.program} did not prepare")
        assert self.prepare_s is not None
        return self.prepare_s

    def close(self) -> None:
        if self._socket is not None:
            with contextlib.suppress(OSError):
                self._socket.send(json.dumps({"op": "exit"}).encode())
        if self._process is not None:
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        if self._socket is not None:
            self._socket.close()
        if self._reader is not None:
            self._reader.join(timeout=5)
        self._process = self._socket = None

    def __enter__(self) -> ActorPool:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests -----------------------------------------------------------------------------
    def _request(self, op: str, actor: str, **extra: Any) -> None:
        if self._socket is None:
            raise ActorPoolError("pool: not started")
        record = self._record(actor)
        message: dict[str, Any] = {"op": op, "actor": actor, **extra}
        if op in ("prewarm", "invoke"):
            message.update(
                cores=list(record.cores),
                checkpoint_dir=str(self.checkpoint_dir),
                steps=self.steps,
                seed=self.seed + list(self.records).index(actor),
                sink=self.sink,
                params=self.params,
                keep_warm_s=self.keep_warm_s,
                niceness=self.niceness,
            )
        self._socket.send(json.dumps(message).encode())

    def _record(self, actor: str) -> ActorRecord:
        if actor not in self.records:
            raise ActorPoolError(f"actor: {actor!r} is not registered in this pool")
        return self.records[actor]

    def prewarm(self, actor: str) -> bool:
        """Fork and restore ``actor`` now; it waits for ``invoke``. False if not idle."""
        with self._lock:
            record = self._record(actor)
            if record.state is not ActorState.CHECKPOINTED:
                return False
            record.state = ActorState.PREWARMING
            record.current = Invocation(actor, prewarmed=True, requested_at=time.monotonic())
            self._request("prewarm", actor)
            return True

    def invoke(self, actor: str) -> Invocation:
        """Start ``actor``'s sampling: go for a pre-warmed one, a fork otherwise."""
        with self._lock:
            record = self._record(actor)
            now = time.monotonic()
            if record.state in (ActorState.PREWARMING, ActorState.WARM):
                assert record.current is not None
                record.current.invoked_at = now
                if record.state is ActorState.WARM:
                    assert record.current.ready_at is not None
                    record.current.startup_wait_s = 0.0
                    record.state = ActorState.RUNNING
                self._request("go", actor, go_at=now)
                return record.current
            if (
                record.state is not ActorState.CHECKPOINTED
                and record.state is not ActorState.FAILED
            ):
                raise ActorPoolError(f"actor: {actor} is {record.state}, cannot invoke it")
            record.current = Invocation(actor, invoked_at=now, requested_at=now)
            record.state = ActorState.PREWARMING
            self._request("invoke", actor)
            return record.current

    def kill(self, actor: str) -> None:
        """SIGKILL the actor's process (a fault, or reclaiming its cores)."""
        with self._lock:
            self._request("kill", actor)

    def wait(self, actors: Iterable[str], timeout_s: float = 120.0) -> dict[str, Invocation]:
        """Wait until each actor's invoked invocation (running, or the last) ended.

        A pre-warm for the next iteration may already have forked the actor again; that
        invocation is not invoked yet, so it is not the one waited for.
        """
        names = list(actors)
        with self._lock:
            awaited: dict[str, Invocation] = {}
            for actor in names:
                record = self._record(actor)
                current = record.current
                if current is not None and current.invoked_at:
                    awaited[actor] = current
                elif record.history:
                    awaited[actor] = record.history[-1]
                else:
                    raise ActorPoolError(f"actor: {actor} was never invoked")
            done = self._lock.wait_for(
                lambda: all(i.code is not None for i in awaited.values()), timeout_s
            )
            if not done:
                running = [a for a, i in awaited.items() if i.code is None]
                raise ActorPoolError(f"actors: {running} did not finish in {timeout_s} s")
            return awaited

    def run_iteration(
        self,
        actors: Iterable[str],
        on_killed: str = "discard",
        drop: Callable[[str, int | None], int] | None = None,
        retries: int = 2,
    ) -> dict[str, Invocation]:
        """Invoke the actors, wait, and re-run any that died before delivering their batch.

        ``on_killed``: ``discard`` drops the interrupted run's data (``drop(actor, since)``),
        ``keep`` keeps its complete steps (``drop(actor, None)``).
        """
        if on_killed not in ("discard", "keep"):
            raise ActorPoolError(f"on_killed: expected discard or keep, got {on_killed!r}")
        names = list(actors)
        since = {a: self._record(a).steps_done for a in names}
        for actor in names:
            self.invoke(actor)
        results = self.wait(names)
        for _ in range(retries):
            failed = [a for a, r in results.items() if not r.sampled]
            if not failed:
                break
            for actor in failed:
                if drop is not None:
                    drop(actor, since[actor] if on_killed == "discard" else None)
                self.invoke(actor)
            results.update(self.wait(failed))
        return results

    def states(self) -> dict[str, str]:
        with self._lock:
            return {name: record.state.value for name, record in self.records.items()}

    def summaries(self) -> list[dict[str, Any]]:
        """Each actor's state, invocations and start-up latencies, as a workflow reports them
        to the buffer service (``BufferClient.report_actors``) for the dashboard."""
        with self._lock:
            return [actor_summary(record) for record in self.records.values()]

    # -- events -------------------------------------------------------------------------------
    def _read(self) -> None:
        assert self._socket is not None
        sock = self._socket
        while True:
            try:
                packet = sock.recv(MAX_PACKET)
            except OSError:
                break
            if not packet:
                break
            event = json.loads(packet)
            with self._lock:
                self._apply(event)
                self._lock.notify_all()
            for listener in self.listeners:
                listener(event)

    def _apply(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "prepared":
            self.prepare_s = float(event["prepare_s"])
            return
        record = self.records.get(event.get("actor", ""))
        if record is None or record.current is None:
            return
        current = record.current
        if kind == "forked":
            record.pid = int(event["pid"])
        elif kind == "ready":
            current.ready_at = float(event["at"])
            current.restored, current.restore_s = bool(event["restored"]), event["restore_s"]
            current.cores = tuple(event.get("cores", ()))
            current.niceness = event.get("niceness")
            if current.prewarmed and current.startup_wait_s is None and current.invoked_at == 0:
                record.state = ActorState.WARM
            else:
                current.startup_wait_s = max(0.0, current.ready_at - current.invoked_at)
                record.state = ActorState.RUNNING
        elif kind == "sampled":
            current.sampled, current.sampled_at = True, float(event["at"])
            record.steps_done += int(event["steps"])
        elif kind == "failed":
            current.error = str(event.get("error"))
        elif kind == "exited":
            current.code, current.finished_at = int(event["code"]), float(event["at"])
            record.state = ActorState.CHECKPOINTED if current.sampled else ActorState.FAILED
            record.pid, record.current = None, None
            record.invocations += 1
            record.history.append(current)


REPORTED_STATES = {ActorState.WARM: "prewarmed"}  # the dashboard's word; the rest as they are


def actor_summary(record: ActorRecord) -> dict[str, Any]:
    """An actor's report: ``restored`` counts starts from its checkpoint, ``cold`` starts with
    none (the program's fresh state); start-up wait is invocation to ready (0 when pre-warmed
    in time), over every finished invocation."""
    waits = sorted(i.startup_wait_s for i in record.history if i.startup_wait_s is not None)
    last = record.history[-1] if record.history else None

    def quantile(q: float) -> float | None:
        return waits[min(len(waits) - 1, int(q * len(waits)))] if waits else None

    restored = sum(1 for i in record.history if i.restored)
    return {
        "actor": record.name,
        "state": REPORTED_STATES.get(record.state, record.state.value),
        "invocations": record.invocations,
        "restored": restored,
        "cold": len(record.history) - restored,
        "last_startup_wait_s": None if last is None else last.startup_wait_s,
        "last_restore_s": None if last is None else last.restore_s,
        "startup_wait_p50_s": quantile(0.5),
        "startup_wait_p99_s": quantile(0.99),
    }


def _repo_root() -> str:
    """The zygote runs ``-m workers.actors.zygote`` from the directory holding ``workers``."""
    return str(Path(__file__).resolve().parents[2])


def cold_start_seconds(
    program: str, actor: str, checkpoint_dir: str | Path, cores: Sequence[int] = ()
) -> dict[str, float]:
    """The baseline start-up: a fresh interpreter imports and prepares the program and restores
    the actor. Returns ``startup_s`` (request to ready) and ``restore_s``."""
    request = {"actor": actor, "checkpoint_dir": str(checkpoint_dir), "cores": list(cores)}
    started = time.monotonic()
    command = [sys.executable, "-m", "workers.actors.zygote", "--program", program]
    command += ["--cold", json.dumps(request)]
    output = subprocess.run(command, capture_output=True, check=False, cwd=_repo_root())
    if output.returncode != 0:
        raise ActorPoolError(f"program: cold start failed: {output.stderr.decode()[-500:]}")
    ready = json.loads(output.stdout.decode().strip().splitlines()[-1])
    return {"startup_s": float(ready["at"]) - started, "restore_s": float(ready["restore_s"])}
