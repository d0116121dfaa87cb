"""Declaring an ARTOS workflow in Python (artos §3.1, §4.2, Table 3): buffers, the triggers bound
to them and where each trigger's firings go, the actors and the learner.

    flow = Workflow("ppo")
    flow.buffer("rollout", schema, capacity=4096, eviction="keep_unsampled")
    flow.trigger("rollout", "learn", DataKeyTrigger(n=4, size=128, keys=schema.keys), learner_q)
    flow.trigger("rollout", "invoke", ObjectKeyTrigger("model_param"), ACTORS)
    flow.actors("actor", count=4, program="workers.actors.cartpole:program", buffer="rollout",
                steps=128, params_key="model_param")
    flow.learner("learner", trigger="learn")
    running = flow.start()          # buffers served over ZeroMQ; running.address for clients

A trigger's target is a callable (called directly in the buffer's thread), a queue (local
queue), a ``tcp://`` / ``ipc://`` address (sent remotely) or ``ACTORS`` (invoke the workflow's
elastic actors). The declaration is plain data (``to_json``) so the web tier can persist it;
the experience data stays in the workers (shared memory, ZeroMQ), never in a database.

The elastic actors' states and start-up latencies go to a buffer service (``report_actors``):
the workflow's own by default, or the control plane's (``report_to``), whose snapshots the
dashboard shows.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workers.algorithms.artos import (
    TransferTrigger,
    Trigger,
)
from workers.buffers.definitions import ACTORS_TARGET, trigger_params
from workers.buffers.passers import DirectPasser, MessagePasser, QueuePasser, RemotePasser
from workers.buffers.schema import Schema, SchemaError
from workers.buffers.service import BufferClient, BufferServer, BufferServiceError
from workers.buffers.store import ExperienceBuffer

log = logging.getLogger(__name__)

REPORT_EVERY_S = 1.0  # the most often the actors' states go to the buffer service


class WorkflowError(ValueError):
    """An inconsistent workflow declaration; the message names the part."""


@dataclass
class BufferSpec:
    name: str
    schema: Schema
    capacity: int
    eviction: str = "fifo"
    prioritised: bool = False
    seed: int = 0


@dataclass
class TriggerSpec:
    buffer: str
    name: str
    trigger: Trigger
    target: Any


@dataclass
class StageSpec:
    name: str
    count: int = 1
    cores_each: int = 1
    trigger: str | None = None
    params: dict[str, Any] = field(default_factory=dict)


ACTORS = ACTORS_TARGET  # a trigger target: invoke the workflow's elastic actors (Table 3)


def passer_for(target: Any) -> MessagePasser:
    """Direct call, local queue or remote address, by what the target is."""
    if target == ACTORS:
        raise WorkflowError("target: '@actors' needs the workflow's actors (declare them)")
    if isinstance(target, str):
        if not target.startswith(("tcp://", "ipc://", "inproc://")):
            raise WorkflowError(f"target: {target!r} is not a tcp://, ipc:// or inproc:// address")
        return RemotePasser(target)
    if hasattr(target, "put") and hasattr(target, "get"):
        return QueuePasser(target)
    if callable(target):
        return DirectPasser(target)
    if hasattr(target, "pass_message"):
        passer: MessagePasser = target
        return passer
    raise WorkflowError(f"target: expected a callable, a queue or an address, got {target!r}")


class Workflow:
    """The declaration; ``start`` builds the buffers, binds the triggers and serves them."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.buffers: dict[str, BufferSpec] = {}
        self.triggers: dict[tuple[str, str], TriggerSpec] = {}
        self.actor_stage: StageSpec | None = None
        self.learner_stage: StageSpec | None = None

    def buffer(
        self,
        name: str,
        schema: Schema,
        capacity: int,
        eviction: str = "fifo",
        prioritised: bool = False,
        seed: int = 0,
    ) -> Workflow:
        if name in self.buffers:
            raise WorkflowError(f"buffer: {name!r} declared twice")
        if not isinstance(schema, Schema):
            raise SchemaError(f"schema: expected a Schema for buffer {name!r}")
        self.buffers[name] = BufferSpec(name, schema, capacity, eviction, prioritised, seed)
        return self

    def trigger(self, buffer: str, name: str, trigger: Trigger, target: Any) -> Workflow:
        if buffer not in self.buffers:
            raise WorkflowError(f"trigger: {name!r} names an undeclared buffer {buffer!r}")
        if (buffer, name) in self.triggers:
            raise WorkflowError(f"trigger: {name!r} declared twice on {buffer!r}")
        keys = getattr(trigger, "keys", ()) or ()
        if isinstance(trigger, TransferTrigger):
            keys = tuple(k for stage in trigger.stages for k in stage)
        unknown = [k for k in keys if k not in self.buffers[buffer].schema.fields]
        if unknown:
            raise WorkflowError(f"trigger: {name!r} uses keys {unknown} not in {buffer!r}")
        if target != ACTORS:
            passer_for(target)  # fail at declaration, not at the first firing
        self.triggers[(buffer, name)] = TriggerSpec(buffer, name, trigger, target)
        return self

    def actors(
        self,
        name: str,
        count: int,
        cores_each: int = 1,
        program: str | None = None,
        buffer: str | None = None,
        steps: int = 1,
        params_key: str | None = None,
        **params: Any,
    ) -> Workflow:
        """Declare the actors: ``name0`` … ``name{count-1}``.

        With ``program`` (``module:attribute``), ``start`` runs them as elastic actors
        (``workers.actors``): each invocation samples ``steps`` steps into ``buffer``, with the
        parameters read from its object ``params_key``; a trigger whose target is ``ACTORS``
        invokes them all. ``keep_warm_s``, ``start_method`` (``spawn`` or ``fork``) and
        ``niceness`` (the actors' priority below the learner's) go to the ``ActorPool``; a
        forked zygote is forked before the buffer server starts.
        """
        if count < 1 or cores_each < 1:
            raise WorkflowError(
                f"actors: count and cores_each must be >= 1 ({count}, {cores_each})"
            )
        if program is not None and buffer not in self.buffers:
            raise WorkflowError(f"actors: buffer {buffer!r} is not declared")
        if steps < 1:
            raise WorkflowError(f"actors: steps must be >= 1, got {steps}")
        if params.get("start_method", "spawn") not in ("spawn", "fork"):
            raise WorkflowError(
                f"actors: start_method must be spawn or fork, got {params['start_method']!r}"
            )
        params.update(program=program, buffer=buffer, steps=steps, params_key=params_key)
        self.actor_stage = StageSpec(name, count, cores_each, params=params)
        return self

    @property
    def actor_names(self) -> list[str]:
        stage = self.actor_stage
        return [] if stage is None else [f"{stage.name}{i}" for i in range(stage.count)]

    def learner(self, name: str, trigger: str, **params: Any) -> Workflow:
        if not any(t_name == trigger for _, t_name in self.triggers):
            raise WorkflowError(f"learner: trigger {trigger!r} is not declared")
        self.learner_stage = StageSpec(name, trigger=trigger, params=params)
        return self

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "buffers": [
                {
                    "name": b.name,
                    "schema": b.schema.to_json(),
                    "capacity": b.capacity,
                    "eviction": b.eviction,
                    "prioritised": b.prioritised,
                }
                for b in self.buffers.values()
            ],
            "triggers": [
                {
                    "buffer": t.buffer,
                    "name": t.name,
                    "kind": getattr(t.trigger, "kind", type(t.trigger).__name__),
                    "params": trigger_params(t.trigger),
                }
                for t in self.triggers.values()
            ],
            "actors": None if self.actor_stage is None else vars(self.actor_stage),
            "learner": None if self.learner_stage is None else vars(self.learner_stage),
        }

    def start(
        self,
        address: str = "tcp://127.0.0.1",
        clock: Callable[[], float] = time.monotonic,
        checkpoint_dir: str | None = None,
        report_to: tuple[str, str] | None = None,
    ) -> RunningWorkflow:
        """Build the buffers (``clock`` stamps their events), serve them, start the elastic
        actors (their checkpoints in ``checkpoint_dir``, a temporary directory by default) and
        bind the triggers. The actors' states go to ``report_to`` (a buffer service's address
        and a buffer it serves; by default this workflow's server and the actors' buffer)."""
        if not self.buffers:
            raise WorkflowError("buffers: a workflow needs at least one buffer")
        built = {
            spec.name: ExperienceBuffer(
                spec.name,
                spec.schema,
                spec.capacity,
                spec.eviction,
                spec.prioritised,
                spec.seed,
                clock=clock,
            )
            for spec in self.buffers.values()
        }
        # the actors' zygote first: a forked one must be forked before the server's threads
        pool, checkpoints = self._start_actor_pool(checkpoint_dir)
        try:
            server = BufferServer(built.values(), address).start()
        except BaseException:
            if pool is not None:
                pool.close()
            if checkpoints is not None:
                checkpoints.cleanup()
            raise
        running = RunningWorkflow(self, built, server)
        try:
            running.attach_actors(pool, checkpoints, report_to)
            for spec in self.triggers.values():
                if spec.target == ACTORS:
                    if running.pool is None:
                        raise WorkflowError(
                            f"target: '@actors' of trigger {spec.name!r} needs actors declared "
                            "with a program"
                        )
                    passer: MessagePasser = DirectPasser(running.invoke_actors)
                else:
                    passer = passer_for(spec.target)
                built[spec.buffer].bind(spec.name, spec.trigger, passer)
        except BaseException:
            running.stop()
            raise
        return running

    def _start_actor_pool(
        self, checkpoint_dir: str | None
    ) -> tuple[Any, tempfile.TemporaryDirectory[str] | None]:
        """The elastic actors' pool, its zygote up (None without actors declared with a
        program), and the temporary checkpoint directory it made when none was given. The
        buffers' address is filled in by ``RunningWorkflow.attach_actors``."""
        stage = self.actor_stage
        if stage is None or not stage.params.get("program"):
            return None, None
        from workers.actors.pool import ActorPool  # the actors depend on the buffers, not back

        checkpoints = None
        if checkpoint_dir is None:
            checkpoints = tempfile.TemporaryDirectory(prefix="loom-artos-")
            checkpoint_dir = checkpoints.name
        pool = ActorPool(
            stage.params["program"],
            self.actor_names,
            checkpoint_dir,
            stage.params["steps"],
            cores_each=stage.cores_each,
            keep_warm_s=stage.params.get("keep_warm_s", 0.0),
            start_method=stage.params.get("start_method", "spawn"),
            niceness=stage.params.get("niceness", 0),
        )
        try:
            pool.start()
        except BaseException:
            if checkpoints is not None:
                checkpoints.cleanup()
            raise
        return pool, checkpoints


class RunningWorkflow:
    """Started buffers, their server and the elastic actors; ``stop`` ends them."""

    def __init__(
        self, workflow: Workflow, buffers: dict[str, ExperienceBuffer], server: BufferServer
    ) -> None:
        self.workflow, self.buffers, self.server = workflow, buffers, server
        self.pool: Any = None
        self.reporter: ActorReporter | None = None
        self._checkpoints: tempfile.TemporaryDirectory[str] | None = None

    @property
    def address(self) -> str:
        return self.server.address

    def attach_actors(
        self,
        pool: Any,
        checkpoints: tempfile.TemporaryDirectory[str] | None,
        report_to: tuple[str, str] | None = None,
    ) -> None:
        """The started pool sends its actors to this workflow's buffers; their states are
        reported to ``report_to`` (by default this server and the actors' buffer)."""
        self._checkpoints = checkpoints
        if pool is None:
            return
        stage = self.workflow.actor_stage
        assert stage is not None
        buffer, key = stage.params["buffer"], stage.params.get("params_key")
        pool.sink = {"address": self.address, "buffer": buffer}
        pool.params = (
            None if key is None else {"address": self.address, "buffer": buffer, "key": key}
        )
        self.pool = pool
        address, report_buffer = report_to or (self.address, buffer)
        self.reporter = ActorReporter(self.pool, self.workflow.name, address, report_buffer)
        self.reporter.start()

    def invoke_actors(self, firing: dict[str, Any] | None = None) -> None:
        """Invoke every actor (the target ``ACTORS``: Table 3's actor invocation)."""
        if self.pool is None:
            raise WorkflowError("actors: this workflow has no elastic actors")
        for actor in self.workflow.actor_names:
            self.pool.invoke(actor)

    def tick(self, now: float | None = None) -> None:
        for buffer in self.buffers.values():
            buffer.tick(now)

    def stop(self) -> None:
        if self.pool is not None:
            self.pool.close()
        if self.reporter is not None:
            self.reporter.stop()  # the last states reported before the server goes
        self.server.stop()
        if self._checkpoints is not None:
            self._checkpoints.cleanup()

    def __enter__(self) -> RunningWorkflow:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ActorReporter:
    """Reports a pool's actors (``ActorPool.summaries``) to a buffer service after they change,
    at most every ``every_s``, from a thread of its own (its own client: ZeroMQ sockets are not
    shared). A service that does not answer costs a logged warning, never the workflow."""

    def __init__(
        self, pool: Any, workflow: str, address: str, buffer: str, every_s: float = REPORT_EVERY_S
    ) -> None:
        self.pool, self.workflow, self.address, self.buffer = pool, workflow, address, buffer
        self.every_s = every_s
        self.reports = 0
        self._changed = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="actor-reporter", daemon=True)

    def start(self) -> ActorReporter:
        self.pool.listeners.append(lambda event: self._changed.set())
        self._changed.set()  # the actors as registered, before any invocation
        self._thread.start()
        return self

    def stop(self) -> None:
        self._changed.set()
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        client = BufferClient(self.address, timeout_s=5)
        try:
            while True:
                self._changed.wait()
                self._changed.clear()
                self._report(client)
                if self._stop.wait(self.every_s):
                    if self._changed.is_set():
                        self._report(client)
                    return
        finally:
            client.close()

    def _report(self, client: BufferClient) -> None:
        try:
            client.report_actors(self.buffer, self.workflow, self.pool.summaries())
            self.reports += 1
        except (BufferServiceError, TimeoutError) as error:
            log.warning("workflow %s: actor states not reported: %s", self.workflow, error)
