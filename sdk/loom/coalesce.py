"""Request coalescing for ``AsyncClient``: concurrent single calls share batched requests.

A trainer runs its trajectories as coroutines; each submits its tool calls one at a time and
awaits them. One HTTP request per ``submit()`` and per ``result()`` costs the control plane a
whole web request each (``bench overhead`` measures it at 100 and 1 000 trajectories), where
the batched forms cost a fraction per action. Coalescing turns concurrent single
calls into the batched forms without changing what any caller sees — its own ``Action``, its
own error, its own timeout:

- ``submit()``: group commit. A submit made while no submit request is in flight goes out at
  once, alone (no added latency at rest); those made while one is in flight wait for it, then go
  out together as one ``POST /actions/batch/?representation=full``. A batch the server rejects
  (validation is all-or-nothing) is re-sent item by item, so each caller gets its own answer;
  every item carries its idempotency key, so nothing is stored twice.
- ``result()``: the ids awaited in one event-loop turn share one ``POST /actions/await/``
  long-poll. When it answers, its ended actions go to their callers and its other ids join the
  next long-poll with the newly awaited ones. At most ``max_polls`` long-polls are in flight: new
  ids beyond that wait for the next poll to answer, or absorb the youngest poll once it has been
  in flight ``absorb_after_s`` (it is abandoned; the server frees its thread on the hang-up), so
  a new id never waits long behind long-running ones. Never the oldest, and never at once: under
  a steady stream of new ids, a busy server would otherwise see every poll abandoned before its
  answer, and no result would ever arrive. A poll carries at most the server's
  ``MAX_AWAIT_IDS``; more ids take more polls.

The sync ``Client`` gets the same from several threads: a call made while another is in flight
runs as an ``AsyncClient`` call on a loop thread of its own (``LoopThread``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from loom.errors import ApiError, AuthenticationError, TransientError
from loom.protocol import MAX_AWAIT_IDS
from loom.types import Action

SendOne = Callable[[dict[str, Any]], Awaitable[Action]]
SendBatch = Callable[[list[dict[str, Any]]], Awaitable[list[Action]]]
SendAwait = Callable[[list[int], float], Awaitable[list[Action]]]  # ids, wait → the ended

T = TypeVar("T")
MAX_BATCH = 1000  # items per coalesced submit (the server's LOOM_MAX_BATCH defaults to 10 000)
MAX_POLLS = 4
ABSORB_AFTER_S = 1.0  # how long new ids may wait for a free poll before absorbing one


class SubmitCoalescer:
    """``submit(body)`` through at most one submit request in flight at a time."""

    def __init__(self, send_one: SendOne, send_batch: SendBatch, max_batch: int = MAX_BATCH):
        self._send_one = send_one
        self._send_batch = send_batch
        self._max_batch = max_batch
        self._queue: list[tuple[dict[str, Any], asyncio.Future[Action]]] = []
        self._sender: asyncio.Task[None] | None = None

    @property
    def busy(self) -> bool:
        return self._sender is not None

    async def submit(self, body: dict[str, Any]) -> Action:
        future: asyncio.Future[Action] = asyncio.get_running_loop().create_future()
        entry = (body, future)
        self._queue.append(entry)
        if self._sender is None:
            self._sender = asyncio.create_task(self._send_queued())
        try:
            return await future
        except asyncio.CancelledError:
            if entry in self._queue:  # cancelled before it was sent: it never is
                self._queue.remove(entry)
            raise

    async def _send_queued(self) -> None:
        try:
            while self._queue:
                batch = self._queue[: self._max_batch]
                del self._queue[: self._max_batch]
                try:
                    await self._send(batch)
                except BaseException as exc:
                    # Whatever went wrong (an answer of the wrong shape, say), no caller hangs.
                    failure = exc if isinstance(exc, Exception) else TransientError(repr(exc))
                    _fail_all([future for _, future in batch], failure)
                    if not isinstance(exc, Exception):
                        raise
        finally:
            self._sender = None

    async def _send(self, batch: list[tuple[dict[str, Any], asyncio.Future[Action]]]) -> None:
        if len(batch) == 1:
            await _settle(batch[0][1], self._send_one(batch[0][0]))
            return
        try:
            actions = await self._send_batch([body for body, _ in batch])
        except ApiError as exc:
            if _every_caller_fails(exc):
                raise  # _send_queued fails the whole batch with it, as any other error
            # Rejected as a whole (one bad item fails the batch): each on its own, concurrently.
            await asyncio.gather(*(_settle(f, self._send_one(body)) for body, f in batch))
            return
        if len(actions) != len(batch):
            raise ValueError(f"a batch of {len(batch)} submits was answered with {len(actions)}")
        for (_, future), action in zip(batch, actions, strict=True):
            if not future.done():
                future.set_result(action)


class ResultCoalescer:
    """``result(id)`` through shared ``await`` long-polls (see the module's docstring)."""

    def __init__(
        self,
        send_await: SendAwait,
        wait_s: float,
        max_polls: int = MAX_POLLS,
        max_ids: int = MAX_AWAIT_IDS,
        absorb_after_s: float = ABSORB_AFTER_S,
    ) -> None:
        self._send_await = send_await
        self._wait_s = wait_s
        self._max_polls = max_polls
        self._max_ids = max_ids
        self._absorb_after_s = absorb_after_s
        self._waiters: dict[int, list[asyncio.Future[Action]]] = {}
        self._unsent: dict[int, None] = {}  # ids awaited but in no long-poll yet, in order
        self._polls: dict[asyncio.Task[None], dict[int, None]] = {}  # in flight, oldest first
        self._sent_at: dict[asyncio.Task[None], float] = {}  # loop time each poll went out
        self._retry_flush: asyncio.TimerHandle | None = None  # when the oldest may be absorbed
        self._closed = False
        self._checks: set[asyncio.Task[None]] = set()  # ids looked at one by one after a refusal
        self._flush_scheduled = False

    @property
    def busy(self) -> bool:
        return bool(self._waiters)

    async def result(self, action_id: int) -> Action:
        """The action once it has ended; the caller bounds the wait (``asyncio.wait_for``)."""
        future: asyncio.Future[Action] = asyncio.get_running_loop().create_future()
        waiters = self._waiters.setdefault(action_id, [])
        waiters.append(future)
        if len(waiters) == 1 and not any(action_id in ids for ids in self._polls.values()):
            self._unsent[action_id] = None
            self._schedule_flush()
        try:
            return await future
        finally:
            waiters.remove(future)
            if not waiters and self._waiters.get(action_id) is waiters:
                del self._waiters[action_id]  # a poll that carries it drops it when it answers
                self._abandon_unwanted_polls()

    def _abandon_unwanted_polls(self) -> None:
        """A long-poll nobody waits on any more (its callers timed out or were cancelled) is
        abandoned: the server frees its thread on the hang-up instead of holding it 30 s."""
        for task, ids in list(self._polls.items()):
            if not any(i in self._waiters for i in ids):
                del self._polls[task]
                task.cancel()

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._closed:
            return
        ids = [i for i in self._unsent if i in self._waiters]
        self._unsent.clear()
        if not ids:
            return
        loop = asyncio.get_running_loop()
        if len(self._polls) >= self._max_polls:
            youngest, absorbed = next(reversed(self._polls.items()))
            age = loop.time() - self._sent_at[youngest]
            if age < self._absorb_after_s:
                # The ids go out when a poll answers, or once the youngest is old enough to be
                # absorbed. The oldest is never absorbed: it is the one nearest its answer.
                self._unsent.update(dict.fromkeys(ids))
                if self._retry_flush is None:
                    self._retry_flush = loop.call_later(
                        self._absorb_after_s - age, self._flush_on_timer
                    )
                return
            if len(absorbed) + len(ids) <= self._max_ids:
                del self._polls[youngest]
                youngest.cancel()
                ids = list(dict.fromkeys([*absorbed, *ids]))
        # More ids than one request may carry: as many polls as it takes (each answers alone).
        for start in range(0, len(ids), self._max_ids):
            chunk = ids[start : start + self._max_ids]
            task = asyncio.create_task(self._poll(chunk))
            self._polls[task] = dict.fromkeys(chunk)
            self._sent_at[task] = loop.time()

    def _flush_on_timer(self) -> None:
        self._retry_flush = None
        self._flush()

    async def _poll(self, ids: list[int]) -> None:
        task = asyncio.current_task()
        assert task is not None
        try:
            ended = await self._send_await(ids, self._wait_s)
        except asyncio.CancelledError:
            raise  # absorbed by a newer poll (which carries its ids now), abandoned or closed
        except ApiError as exc:
            if _every_caller_fails(exc):
                self._fail(ids, exc)
            else:
                # One id the server refuses (deleted, another job's) fails the whole poll: look
                # at each on its own, so only its own caller sees the error.
                self._checks.add(asyncio.create_task(self._check_each(ids)))
        except Exception as exc:
            self._fail(ids, exc)
        else:
            self._settle(ids, ended)
        finally:
            self._polls.pop(task, None)
            self._sent_at.pop(task, None)
            if self._unsent:  # ids held while every poll was in flight: a slot is free
                self._schedule_flush()

    def _settle(self, ids: Sequence[int], ended: Sequence[Action]) -> None:
        """Hand ended actions to their callers; the other ids go into the next poll."""
        for action in ended:
            for future in self._waiters.get(action.id, ()):
                if not future.done():
                    future.set_result(action)
        done = {action.id for action in ended}
        still = [i for i in ids if i not in done and i in self._waiters]
        if still:
            for action_id in still:
                self._unsent[action_id] = None
            self._schedule_flush()

    async def _check_each(self, ids: Sequence[int]) -> None:
        async def check(action_id: int) -> None:
            try:
                ended = await self._send_await([action_id], 0)
            except Exception as exc:
                self._fail([action_id], exc)
            else:
                self._settle([action_id], ended)

        try:
            await asyncio.gather(*(check(i) for i in ids if i in self._waiters))
        finally:
            self._checks.discard(asyncio.current_task())

    def _fail(self, ids: Sequence[int], exc: BaseException) -> None:
        _fail_all([f for i in ids for f in self._waiters.get(i, ())], exc)

    async def close(self) -> None:
        self._closed = True
        self._unsent.clear()
        if self._retry_flush is not None:
            self._retry_flush.cancel()
        polls = [*self._polls, *self._checks]
        self._polls.clear()
        for task in polls:
            task.cancel()
        for task in polls:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._fail(list(self._waiters), TransientError("the client was closed"))


def _every_caller_fails(exc: ApiError) -> bool:
    """An error no single item caused (a bad key, a server error): every caller gets it."""
    return isinstance(exc, AuthenticationError) or exc.status_code >= 500


async def _settle(future: asyncio.Future[Action], call: Awaitable[Action]) -> None:
    try:
        action = await call
    except Exception as exc:
        if not future.done():
            future.set_exception(exc)
    else:
        if not future.done():
            future.set_result(action)


def _fail_all(futures: Sequence[asyncio.Future[Action]], exc: BaseException) -> None:
    for future in futures:
        if not future.done():
            future.set_exception(exc)


class LoopThread:
    """An event loop on a daemon thread, for the sync ``Client``: its calls made from several
    threads at once run as ``AsyncClient`` calls here, where they coalesce like coroutines."""

    def __init__(self, name: str = "loom-sdk") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def call(self, call: Coroutine[Any, Any, T]) -> T:
        """Run ``call`` on the loop; block this thread until it returns (or raises)."""
        return asyncio.run_coroutine_threadsafe(call, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()
