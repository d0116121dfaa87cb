"""The agent loop shared by the cpu and api agents.

An agent reads its node's dispatch stream in batches (consumer group ``agents``), runs each
Dispatch as its own asyncio task, publishes the ActionResult on its pool's event stream and only
then acknowledges the dispatch entry — results and acks are batched (one pipelined XADD batch, one
XACK) by a single flusher. Cancel kills a running action; TrajectoryEnd drops the trajectory's
sandbox. A heartbeat loop publishes Heartbeat (with the running action keys) and ``touch``es the
entries still running so a live agent's long action is never reclaimed; a reclaim loop takes over
entries a dead instance of this node left pending (XAUTOCLAIM after ``reclaim_idle_ms``). A
reclaimed dispatch is re-run only if ``retry_on_redelivery``; otherwise its leftovers are killed
and it ends ``failed``/``agent_lost`` so the scheduler can retry it elsewhere (issue 6).
"""

from __future__ import annotations

import abc
import asyncio
import logging
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass

from workers.transport.base import Delivery, Transport
from workers.transport.messages import (
    REASON_AGENT_LOST,
    REASON_CANCELLED,
    REASON_INFRA_ERROR,
    ActionResult,
    Cancel,
    Dispatch,
    Heartbeat,
    Message,
    NodeRegister,
    TrajectoryEnd,
)
from workers.transport.streams import AGENT_GROUP, StreamNames

logger = logging.getLogger(__name__)

_STOP_FLUSHING = "\x00stop"  # an outbox entry id no stream uses: the flusher's stop marker


@dataclass(frozen=True)
class AgentSettings:
    """Timing knobs of the agent loop (seconds / milliseconds as named)."""

    heartbeat_interval_s: float = 2.0
    register_every_heartbeats: int = 15
    reclaim_interval_s: float = 2.0
    reclaim_idle_ms: int = 15_000
    read_count: int = 128
    read_block_ms: int = 1_000
    remember_cancelled: int = 10_000
    remember_finished: int = 100_000
    remember_results: int = 1_024  # of the finished: the latest, sent again on a re-dispatch
    stop_timeout_s: float = 30.0


@dataclass
class _Running:
    dispatch: Dispatch
    entry_id: str
    task: asyncio.Task[None]


class AgentBase(abc.ABC):
    """Reads dispatches, runs them concurrently, reports results (subclasses implement execute)."""

    backend_name: str = "none"

    def __init__(
        self,
        *,
        transport: Transport,
        node_id: str,
        pool: str,
        streams: StreamNames | None = None,
        agent_id: str | None = None,
        settings: AgentSettings | None = None,
    ) -> None:
        self.transport = transport
        self.node_id = node_id
        self.pool = pool
        self.streams = streams or StreamNames()
        self.agent_id = agent_id or f"{node_id}:{uuid.uuid4().hex[:8]}"
        self.settings = settings or AgentSettings()
        self.dispatch_stream = self.streams.dispatch(node_id)
        self.events_stream = self.streams.events(pool)
        self._running: dict[str, _Running] = {}
        self._cancelled: OrderedDict[str, None] = OrderedDict()
        # Keys (action:attempt) that ended here: a scheduler restarted after a crash re-dispatches
        # what it had recorded as scheduled with the same attempt; that copy must not run again.
        self._finished: OrderedDict[str, None] = OrderedDict()
        # The latest of their results: the copy may come because the first result was lost
        # (Redis restarted empty before the scheduler read it), so it is answered again.
        self._results: OrderedDict[str, ActionResult] = OrderedDict()
        self._ending_trajectories: set[str] = set()
        self._outbox: asyncio.Queue[tuple[ActionResult | None, str]] = asyncio.Queue()
        self._loops: list[asyncio.Task[None]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._stopping = False
        self._stopped = asyncio.Event()
        self.started_at = time.time()

    # ----- what subclasses provide -------------------------------------------------------

    @abc.abstractmethod
    def registration(self) -> NodeRegister:
        """This node's capacity, published on start and periodically."""

    @abc.abstractmethod
    async def execute(self, dispatch: Dispatch) -> ActionResult:
        """Run one dispatch to its end. Must clean up and re-raise on cancellation."""

    async def end_trajectory(  # noqa: B027 (optional hook)
        self, trajectory_id: str
    ) -> None:
        """Drop the trajectory's sandbox (working dir, container). Default: nothing to drop."""

    async def clean_lost_attempt(  # noqa: B027 (optional hook)
        self, dispatch: Dispatch
    ) -> None:
        """Kill what a dead agent instance left running for ``dispatch``. Default: nothing."""

    async def maintain(  # noqa: B027 (optional hook)
        self, now: float
    ) -> None:
        """Periodic housekeeping (idle-TTL sweeps), called from the heartbeat loop."""

    async def close_backend(  # noqa: B027 (optional hook)
        self,
    ) -> None:
        """Release backend resources on stop."""

    # ----- lifecycle ---------------------------------------------------------------------

    @property
    def running_keys(self) -> tuple[str, ...]:
        return tuple(self._running)

    async def start(self) -> None:
        """Create the groups, register, and start the loops (returns immediately)."""
        await self.transport.ensure_group(self.dispatch_stream, AGENT_GROUP)
        await self.transport.publish(self.events_stream, self.registration())
        self._loops = [
            asyncio.create_task(self._read_loop(), name=f"{self.agent_id}-read"),
            asyncio.create_task(self._heartbeat_loop(), name=f"{self.agent_id}-heartbeat"),
            asyncio.create_task(self._reclaim_loop(), name=f"{self.agent_id}-reclaim"),
        ]
        for task in self._loops:
            task.add_done_callback(self._loop_ended)
        self._start_flusher()
        logger.info("agent %s started on %s", self.agent_id, self.dispatch_stream)

    async def run(self) -> None:
        """Start and serve until ``stop()``."""
        await self.start()
        await self._stopped.wait()

    async def stop(self) -> None:
        """Stop reading, end running actions as ``agent_lost``, flush results, close.

        Every phase is bounded (``stop_timeout_s``): a wedged action or connection is logged and
        left behind rather than hanging the shutdown.
        """
        if self._stopping:
            return
        self._stopping = True
        for task in self._loops:
            task.cancel()
        running = [entry.task for entry in self._running.values()]
        for task in running:
            task.cancel()
        await self._settle(running, "running actions")
        self._outbox.put_nowait((None, _STOP_FLUSHING))
        if self._flusher is None or self._flusher.done():
            self._start_flusher()
        assert self._flusher is not None
        if not await self._settle([self._flusher], "result flusher"):
            self._flusher.cancel()
        await self._settle(self._loops, "agent loops")
        try:
            await asyncio.wait_for(self.close_backend(), self.settings.stop_timeout_s)
        except TimeoutError:
            logger.error("agent %s: closing the backend timed out", self.agent_id)
        self._stopped.set()

    async def _settle(self, tasks: list[asyncio.Task[None]], what: str) -> bool:
        """Wait (bounded) for tasks to end; False and an error log if some did not."""
        if not tasks:
            return True
        _, pending = await asyncio.wait(tasks, timeout=self.settings.stop_timeout_s)
        if pending:
            names = sorted(task.get_name() for task in pending)
            logger.error("agent %s: %s still not done after %.0f s: %s", self.agent_id, what,
                         self.settings.stop_timeout_s, names)  # fmt: skip
        return not pending

    def _start_flusher(self) -> None:
        self._flusher = asyncio.create_task(self._flush_loop(), name=f"{self.agent_id}-flush")
        self._flusher.add_done_callback(self._loop_ended)

    def _loop_ended(self, task: asyncio.Task[None]) -> None:
        """A loop must only end when the agent stops; log (and restart the flusher) otherwise."""
        if task.cancelled() or (self._stopping and task is self._flusher):
            return
        error = task.exception()
        logger.error("agent %s: loop %s ended: %r", self.agent_id, task.get_name(), error,
                     exc_info=error)  # fmt: skip
        if task is self._flusher and not self._stopping:
            self._start_flusher()

    # ----- handling deliveries -----------------------------------------------------------

    async def handle(self, delivery: Delivery) -> None:
        """Route one stream entry (public so tests and the embedded mode can drive it)."""
        message: Message = delivery.message
        if isinstance(message, Dispatch):
            await self._on_dispatch(message, delivery)
        elif isinstance(message, Cancel):
            self._on_cancel(message)
            await self._outbox.put((None, delivery.entry_id))
        elif isinstance(message, TrajectoryEnd):
            await self._on_trajectory_end(message.trajectory_id)
            await self._outbox.put((None, delivery.entry_id))
        else:
            logger.error("agent %s got unexpected %s; acking", self.agent_id, type(message))
            await self._outbox.put((None, delivery.entry_id))

    async def _on_dispatch(self, dispatch: Dispatch, delivery: Delivery) -> None:
        running = self._running.get(dispatch.key)
        if running is not None or dispatch.key in self._finished:
            # Our own entry back through reclaim (it runs here), or a duplicate of an attempt that
            # runs or already ended here (re-dispatched by a restarted scheduler): run it once.
            # An ended one's result goes out again; the scheduler ignores one it already has.
            if running is None or running.entry_id != delivery.entry_id:
                again = self._results.get(dispatch.key) if running is None else None
                await self._outbox.put((again, delivery.entry_id))
            return
        if delivery.delivery_count > 1:
            await self.clean_lost_attempt(dispatch)
            if not dispatch.retry_on_redelivery:
                now = time.time()
                result = self._ended(dispatch, "failed", REASON_AGENT_LOST, now, now)
                await self._outbox.put((result, delivery.entry_id))
                return
        if dispatch.key in self._cancelled or dispatch.action_id in self._cancelled:
            now = time.time()
            result = self._ended(dispatch, "cancelled", REASON_CANCELLED, now, now)
            await self._outbox.put((result, delivery.entry_id))
            return
        if dispatch.kind == "noop":  # answered inline: no task, no backend
            now = time.time()
            await self._outbox.put(
                (self._ended(dispatch, "succeeded", None, now, now), delivery.entry_id)
            )
            return
        task = asyncio.create_task(self._run_one(dispatch, delivery.entry_id))
        self._running[dispatch.key] = _Running(dispatch, delivery.entry_id, task)

    def _remember_finished(self, result: ActionResult) -> None:
        key = result.key
        self._finished[key] = None
        while len(self._finished) > self.settings.remember_finished:
            self._finished.popitem(last=False)
        self._results[key] = result
        while len(self._results) > self.settings.remember_results:
            self._results.popitem(last=False)

    def _on_cancel(self, cancel: Cancel) -> None:
        key = cancel.action_id if cancel.attempt is None else f"{cancel.action_id}:{cancel.attempt}"
        self._cancelled[key] = None
        while len(self._cancelled) > self.settings.remember_cancelled:
            self._cancelled.popitem(last=False)
        for running in list(self._running.values()):
            if running.dispatch.action_id == cancel.action_id and (
                cancel.attempt is None or running.dispatch.attempt == cancel.attempt
            ):
                running.task.cancel()

    async def _on_trajectory_end(self, trajectory_id: str) -> None:
        if any(r.dispatch.trajectory_id == trajectory_id for r in self._running.values()):
            self._ending_trajectories.add(trajectory_id)  # cleaned when its last action ends
            return
        await self._end_trajectory_safely(trajectory_id)

    async def _end_trajectory_safely(self, trajectory_id: str) -> None:
        try:
            await self.end_trajectory(trajectory_id)
        except Exception:
            logger.exception("cleaning trajectory %s failed", trajectory_id)

    def _ended(
        self, dispatch: Dispatch, status: str, reason: str | None, started: float, finished: float
    ) -> ActionResult:
        return ActionResult(
            action_id=dispatch.action_id,
            attempt=dispatch.attempt,
            node_id=self.node_id,
            status=status,  # type: ignore[arg-type]
            reason=reason,
            started_at=started,
            finished_at=finished,
            cores=dispatch.cores,
            trajectory_id=dispatch.trajectory_id,
        )

    async def _run_one(self, dispatch: Dispatch, entry_id: str) -> None:
        started = time.time()
        try:
            result = await self.execute(dispatch)
        except asyncio.CancelledError:
            if self._stopping:
                result = self._ended(dispatch, "failed", REASON_AGENT_LOST, started, time.time())
            else:
                result = self._ended(dispatch, "cancelled", REASON_CANCELLED, started, time.time())
        except Exception as exc:
            logger.exception("action %s failed in the agent", dispatch.key)
            result = self._ended(dispatch, "failed", REASON_INFRA_ERROR, started, time.time())
            result = ActionResult(**{**result.__dict__, "output": f"{type(exc).__name__}: {exc}"})
        self._running.pop(dispatch.key, None)
        self._remember_finished(result)
        await self._outbox.put((result, entry_id))
        trajectory = dispatch.trajectory_id
        if (
            trajectory is not None
            and (dispatch.end_trajectory or trajectory in self._ending_trajectories)
            and not any(r.dispatch.trajectory_id == trajectory for r in self._running.values())
        ):
            self._ending_trajectories.discard(trajectory)
            await self._end_trajectory_safely(trajectory)

    # ----- loops -------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        backoff = 0.05
        while not self._stopping:  # also ends if a cancellation was swallowed
            try:
                deliveries = await self.transport.read(
                    self.dispatch_stream,
                    AGENT_GROUP,
                    self.agent_id,
                    count=self.settings.read_count,
                    block_ms=self.settings.read_block_ms,
                )
                backoff = 0.05
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("reading %s failed; retrying", self.dispatch_stream)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            if self._stopping:  # left pending: a later instance reclaims them
                return
            for delivery in deliveries:
                await self.handle(delivery)
            # Let the flusher send what was answered inline (no-ops, duplicates, cancels) before
            # this loop blocks on its next read: the result reaches the scheduler one turn sooner.
            await asyncio.sleep(0)

    async def _flush_loop(self) -> None:
        """Publish a batch of results and ack their entries together (never ack before send).

        Ends after flushing everything queued before the stop marker ``stop()`` enqueues.
        """
        while True:
            batch = [await self._outbox.get()]
            while not self._outbox.empty():
                batch.append(self._outbox.get_nowait())
            stopping = any(entry_id == _STOP_FLUSHING for _, entry_id in batch)
            work = [(r, entry_id) for r, entry_id in batch if entry_id != _STOP_FLUSHING]
            results = [result for result, _ in work if result is not None]
            entry_ids = [entry_id for _, entry_id in work]
            backoff = 0.05
            while work:
                try:
                    await self.transport.publish_and_ack(
                        self.events_stream, results, self.dispatch_stream, AGENT_GROUP, entry_ids
                    )
                    break
                except asyncio.CancelledError:
                    for item in work:  # keep them for whoever flushes next
                        self._outbox.put_nowait(item)
                    raise
                except Exception:
                    logger.exception("publishing %d results failed; retrying", len(results))
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 2.0)
            if stopping:
                return

    def heartbeat(self) -> Heartbeat:
        return Heartbeat(
            node_id=self.node_id,
            pool=self.pool,
            agent_id=self.agent_id,
            sent_at=time.time(),
            running=self.running_keys,
        )

    async def _heartbeat_loop(self) -> None:
        beats = 0
        while not self._stopping:  # also ends if a cancellation was swallowed
            await asyncio.sleep(self.settings.heartbeat_interval_s)
            beats += 1
            try:
                if beats % self.settings.register_every_heartbeats == 0:
                    await self.transport.publish(self.events_stream, self.registration())
                await self.transport.publish(self.events_stream, self.heartbeat())
                entry_ids = [r.entry_id for r in self._running.values()]
                await self.transport.touch(
                    self.dispatch_stream, AGENT_GROUP, self.agent_id, entry_ids
                )
                await self.maintain(time.time())
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("heartbeat of %s failed", self.agent_id)

    async def _reclaim_loop(self) -> None:
        while not self._stopping:  # also ends if a cancellation was swallowed
            await asyncio.sleep(self.settings.reclaim_interval_s)
            try:
                deliveries = await self.transport.reclaim(
                    self.dispatch_stream,
                    AGENT_GROUP,
                    self.agent_id,
                    min_idle_ms=self.settings.reclaim_idle_ms,
                )
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("reclaiming on %s failed", self.dispatch_stream)
                continue
            if self._stopping:
                return
            running_entries = {r.entry_id for r in self._running.values()}
            for delivery in deliveries:
                if delivery.entry_id in running_entries:
                    continue
                logger.warning(
                    "agent %s reclaimed %s (delivery %d)",
                    self.agent_id,
                    delivery.entry_id,
                    delivery.delivery_count,
                )
                await self.handle(delivery)
