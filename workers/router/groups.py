"""DARTS group rollouts on the live path: ``POST /v1/loom/groups`` (darts §4, Alg. 1–2).

One request carries a batch of prompts and ``M``. The router plans the batch with the one DARTS
implementation (:func:`plan_batch` through :class:`JobShaping`: the job's budget policy and its
per-prompt variance history), then fans each prompt's ``M'_i`` candidates out as ordinary
streamed generations through its own :class:`Forwarder` — so Heddle's placement and priority,
worker health, the retry of a request whose worker failed before answering, and the abort path
all apply to them. Each prompt's :class:`GroupRollout` takes the finished candidates; when it
completes (dual-end: the whole pool; tail pruning: ``M`` valid ones, §4.3.1 early stop) the
losers still running are ABORTED on their engines.

Streaming (§4.3.2): a kept sample goes to the client as soon as its membership is certain
(:meth:`GroupRollout.surely_kept`, from the finished lengths and the running candidates' token
counts), not at the group's end. SSE events, each ``data: {"type": ...}``:

- ``group.planned`` — the budget ``M_total``, ``allocations``, ``pruned_prompts``;
- ``sample.tokens`` — with ``token_chunk``: the next piece of a candidate's text (``draw``
  numbers its attempt), sent while it decodes, kept or not;
- ``sample.kept`` — one kept sample (text, tokens, finish reason, seconds since the start);
- ``sample.dropped`` — a candidate that will not be in the group (``reason``: ``not_selected``,
  ``aborted``, ``lost``) or a draw voided by a lost worker (``redrawn``: its slot draws again);
- ``prompt.complete`` — a prompt's group is settled;
- ``group.complete`` — statistics: budget, allocations, pruned prompts, every candidate's length
  and fate, and the next step's budget inputs (``ρ``, per-prompt variances);
- ``group.error`` — the group cannot finish (``retryable`` when a retry can succeed); then
  ``data: [DONE]``.

``"stream": false`` answers one JSON object with the kept samples and the same statistics.

Failures: a candidate whose worker is lost mid-stream leaves the pool when the prompt still has
``M`` candidates without it (the redundancy absorbs it, :meth:`GroupRollout.sample_lost`);
otherwise it is drawn again elsewhere; with no worker left the group ends with a retryable error.
A client that leaves aborts every candidate still running. Candidates are router-side
trajectories (ids ``<group>/<prompt>/<sample>``), not control-plane ``Trajectory`` rows.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from workers.algorithms.darts import BatchPlan, DartsConfig, GroupDecision, GroupRollout
from workers.engine.asgi import SSE_HEADERS, Receive, Send, send_json, sse_event
from workers.router.forward import Forwarder, RouterError
from workers.router.group_budget import JobShaping, PromptOutcome, ShapingBook
from workers.router.group_request import GroupPrompt, GroupRequest, parse_group
from workers.router.pool import WorkerPool
from workers.router.trajectories import ABORTED, FINISHED

MAX_DRAWS = 3  # draws of one candidate slot when its worker keeps being lost
# Candidate j of prompt i samples with seed ``seed + SEED_STRIDE·i + j``: a larger pool extends
# a smaller one with the same base seed (standard's M samples are DARTS's first M candidates).
SEED_STRIDE = 4096
KEPT, DROPPED, ABORTED_BY_GROUP, LOST = "kept", "dropped", "aborted", "lost"


class SampleRelay:
    """ASGI ``receive``/``send`` for one candidate the router forwards to itself: reads the
    stream's text, token count and finish reason; ``cancel`` makes the forwarder abort it."""

    def __init__(self, on_tokens: Callable[[SampleRelay], None]) -> None:
        self.cancel = asyncio.Event()
        self.on_tokens = on_tokens
        self.status = 0
        self.pieces: list[str] = []
        self.floor = 0  # events with text: never more than the tokens produced
        self.chunked = 0  # pieces already sent as token chunks
        self.tokens: int | None = None
        self.finish_reason: str | None = None
        self.error: dict[str, Any] | None = None
        self.raw = bytearray()

    async def receive(self) -> dict[str, Any]:
        await self.cancel.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
            return
        body = message.get("body", b"")
        if self.status != 200:
            self.raw += body
            return
        grew = False
        for event in body.split(b"\n\n"):
            event = event.strip()
            if not event.startswith(b"data: {"):
                continue
            try:
                data = json.loads(event[6:])
            except ValueError:
                continue  # a malformed event carries nothing to count
            if "error" in data:
                self.error = data["error"]
                continue
            usage = data.get("usage")
            if usage:
                self.tokens = int(usage.get("completion_tokens", 0))
            for choice in data.get("choices") or ():
                text = choice.get("text")
                if text is None:
                    text = (choice.get("delta") or {}).get("content")
                if text:
                    self.pieces.append(text)
                    self.floor += 1
                    grew = True
                if choice.get("finish_reason"):
                    self.finish_reason = str(choice["finish_reason"])
        if grew:
            self.on_tokens(self)

    @property
    def length(self) -> int:
        return self.tokens if self.tokens is not None else self.floor

    def failure(self) -> tuple[int, str, str, str]:
        """An engine's refusal (status, field, reason, code) from its error body."""
        try:
            error = json.loads(bytes(self.raw)).get("error") or {}
        except ValueError:
            error = {}
        return (
            self.status,
            str(error.get("param") or "prompts"),
            str(error.get("message") or bytes(self.raw[:200]).decode(errors="replace")),
            str(error.get("code") or "engine_error"),
        )


@dataclass
class Candidate:
    prompt: int
    sample: int
    relay: SampleRelay | None = None
    fate: str | None = None  # kept / dropped / aborted / lost, once known
    released: bool = False
    finished_length: int | None = None
    draws: int = 0


@dataclass
class PromptRun:
    index: int
    prompt: GroupPrompt
    rollout: GroupRollout
    candidates: list[Candidate]
    unreleased_min: float = float("inf")  # shortest finished valid sample not yet sent
    done: bool = False


@dataclass
class GroupFailure:
    status: int
    field: str
    reason: str
    code: str
    retryable: bool


@dataclass(eq=False)
class GroupRun:
    """One group rollout: fan-out, decisions, aborts, events (module docstring)."""

    forwarder: Forwarder
    job: str
    request: GroupRequest
    plan: BatchPlan
    emit: Callable[[dict[str, Any]], None]
    group_id: str = field(default_factory=lambda: f"group-{uuid.uuid4().hex[:16]}")
    seed: int = 0
    started: float = field(default_factory=time.monotonic)
    first_kept_s: float | None = None
    failure: GroupFailure | None = None
    stopping: bool = False
    prompts: list[PromptRun] = field(default_factory=list)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        rollouts = self.plan.group_rollouts(self._config())
        for index, (prompt, rollout) in enumerate(zip(self.request.prompts, rollouts, strict=True)):
            candidates = [Candidate(index, s) for s in range(rollout.allocated)]
            self.prompts.append(PromptRun(index, prompt, rollout, candidates))

    def _config(self) -> DartsConfig:
        return DartsConfig(
            group_size=self.request.group_size,
            longest=self.request.longest,
            tail_pruning=self.request.tail_pruning,
        )

    # ------------------------------------------------------------------ driving
    async def run(self) -> None:
        for run in self.prompts:
            for candidate in run.candidates:
                seed = self.seed + SEED_STRIDE * run.index + candidate.sample
                self._tasks.append(asyncio.ensure_future(self._draw(run, candidate, seed)))
        everything = asyncio.gather(*self._tasks)
        try:
            await asyncio.shield(everything)
        except asyncio.CancelledError:
            # The client left. Cancelling the draws would drop their engine requests unaborted;
            # aborting them through the forwarder ends each draw cleanly (nothing keeps decoding).
            self.abort_all()
            await asyncio.gather(everything, return_exceptions=True)
            raise

    def abort_all(self) -> None:
        self.stopping = True  # a draw not started yet never starts
        for run in self.prompts:
            for candidate in run.candidates:
                if candidate.relay is not None and candidate.fate is None:
                    candidate.relay.cancel.set()

    def fail(self, failure: GroupFailure) -> None:
        if self.failure is None:
            self.failure = failure
        self.abort_all()

    async def _draw(self, run: PromptRun, candidate: Candidate, seed: int) -> None:
        while self.failure is None and not run.done and not self.stopping:
            candidate.draws += 1
            relay = candidate.relay = SampleRelay(partial(self._tokens, run, candidate))
            redraw = (candidate.draws - 1) * SEED_STRIDE * len(self.prompts)  # unused seeds
            lost = await self._forward(run, candidate, relay, seed + redraw)
            if relay.cancel.is_set() or run.done:
                return  # aborted by the group (or the client left): censored at its floor
            if self.failure is not None:
                return
            if not lost:
                if relay.finish_reason not in ("stop", "length"):  # aborted from outside
                    self._lost(run, candidate)
                    return
                candidate.finished_length = relay.length
                decision = run.rollout.sample_finished(
                    candidate.sample, relay.length, relay.finish_reason == "length"
                )
                self._decided(run, decision)
                return
            left = run.rollout.allocated - len(run.rollout.lost) - 1
            if left >= self.request.group_size:
                self._lost(run, candidate)
                return
            self.emit({"type": "sample.dropped", "prompt": run.index, "sample": candidate.sample,
                       "reason": "redrawn", "draw": candidate.draws})  # fmt: skip
            if candidate.draws >= MAX_DRAWS:
                self.fail(GroupFailure(503, "worker", "candidates' workers kept being lost; "
                                       "retry the group", "worker_lost", True))  # fmt: skip
                return

    async def _forward(
        self, run: PromptRun, candidate: Candidate, relay: SampleRelay, seed: int
    ) -> bool:
        """One draw through the router's forwarder; True when its worker was lost."""
        suffix = "" if candidate.draws == 1 else f".d{candidate.draws}"
        trajectory_id = f"{self.group_id}/{run.index}/{candidate.sample}{suffix}"
        prompt = run.prompt
        state = self.forwarder.table.open(
            trajectory_id, job_id=self.job, prompt_id=prompt.prompt_id,
            group_id=f"{self.group_id}/{run.index}", prompt_tokens=prompt.spec.prompt_tokens,
        )  # fmt: skip
        body = {**prompt.body, "stream": True, "stream_options": {"include_usage": True}}
        body["seed"] = seed
        lost = False
        try:
            await self.forwarder.forward(
                state, prompt.path, body, prompt.spec, relay.receive, relay.send
            )
        except RouterError as exc:
            if not exc.retryable:
                self.fail(GroupFailure(exc.status, exc.field, exc.reason, exc.code, False))
            elif not relay.cancel.is_set():
                lost = True
        finally:
            finished = relay.finish_reason in ("stop", "length") and relay.error is None
            self.forwarder.end_trajectory(trajectory_id, FINISHED if finished else ABORTED)
        if relay.status not in (0, 200) and not relay.cancel.is_set():
            status, field_name, reason, code = relay.failure()
            self.fail(GroupFailure(status, field_name, reason, code, status >= 500))
        return lost or (relay.error is not None and not relay.cancel.is_set())

    # ------------------------------------------------------------------ decisions
    def _lost(self, run: PromptRun, candidate: Candidate) -> None:
        candidate.fate = LOST
        self.emit({"type": "sample.dropped", "prompt": run.index, "sample": candidate.sample,
                   "reason": "lost"})  # fmt: skip
        self._decided(run, run.rollout.sample_lost(candidate.sample))

    def _decided(self, run: PromptRun, decision: GroupDecision) -> None:
        if run.done:
            return
        if not decision.complete:
            self._release(run)
            return
        run.done = True
        for sample in decision.abort:
            candidate = run.candidates[sample]
            candidate.fate = ABORTED_BY_GROUP
            if candidate.relay is not None:
                candidate.relay.cancel.set()
        kept = set(run.rollout.kept())
        for sample in sorted(kept):
            self._send_kept(run, run.candidates[sample])
        for candidate in run.candidates:
            if candidate.fate is None and candidate.sample not in kept:
                candidate.fate = DROPPED
                self.emit({"type": "sample.dropped", "prompt": run.index,
                           "sample": candidate.sample, "reason": "not_selected",
                           "tokens": candidate.finished_length})  # fmt: skip
        for sample in decision.abort:
            self.emit({"type": "sample.dropped", "prompt": run.index, "sample": sample,
                       "reason": "aborted"})  # fmt: skip
        self.emit({"type": "prompt.complete", "prompt": run.index,
                   "prompt_id": run.prompt.prompt_id, "kept": sorted(kept),
                   "aborted": list(decision.abort), "lost": list(run.rollout.lost)})  # fmt: skip

    def _floors(self, run: PromptRun) -> dict[int, int]:
        return {
            c.sample: c.relay.floor if c.relay is not None else 0
            for c in run.candidates
            if c.finished_length is None and c.fate is None
        }

    def _release(self, run: PromptRun) -> None:
        """Send every finished sample whose place in the group is already certain."""
        for sample in run.rollout.surely_kept(self._floors(run)):
            self._send_kept(run, run.candidates[sample])
        pending = [  # truncated samples wait for the group's end: they set no threshold
            float(c.finished_length)
            for c in run.candidates
            if c.finished_length is not None
            and not c.released
            and c.relay is not None
            and c.relay.finish_reason != "length"
        ]
        run.unreleased_min = min(pending, default=float("inf"))

    def _tokens(self, run: PromptRun, candidate: Candidate, relay: SampleRelay) -> None:
        """A running candidate grew: send a token chunk when one is due (§4.3.2); past the
        shortest unsent finished sample, look again at what is settled."""
        chunk = self.request.token_chunk
        if chunk and relay.floor - relay.chunked >= chunk and relay is candidate.relay:
            text = "".join(relay.pieces[relay.chunked :])
            relay.chunked = len(relay.pieces)
            self.emit({"type": "sample.tokens", "prompt": run.index, "sample": candidate.sample,
                       "draw": candidate.draws, "text": text})  # fmt: skip
        if not run.done and relay.floor in (run.unreleased_min, run.unreleased_min + 1):
            self._release(run)

    def _send_kept(self, run: PromptRun, candidate: Candidate) -> None:
        if candidate.released:
            return
        candidate.released = True
        candidate.fate = KEPT
        relay = candidate.relay
        assert relay is not None
        elapsed = time.monotonic() - self.started
        if self.first_kept_s is None:
            self.first_kept_s = elapsed
        self.emit({"type": "sample.kept", "prompt": run.index, "prompt_id": run.prompt.prompt_id,
                   "sample": candidate.sample, "text": "".join(relay.pieces),
                   "tokens": relay.length, "finish_reason": relay.finish_reason,
                   "elapsed_s": round(elapsed, 6)})  # fmt: skip

    # ------------------------------------------------------------------ results
    def outcomes(self) -> list[PromptOutcome]:
        result = []
        for run in self.prompts:
            finished: list[int] = []
            censored: list[int] = []
            for candidate in run.candidates:
                if candidate.finished_length is not None:
                    truncated = candidate.relay is not None and (
                        candidate.relay.finish_reason == "length"
                    )
                    (censored if truncated else finished).append(candidate.finished_length)
                elif candidate.fate == ABORTED_BY_GROUP and candidate.relay is not None:
                    censored.append(candidate.relay.floor)
            result.append(PromptOutcome(run.prompt.prompt_id, tuple(finished), tuple(censored)))
        return result

    def statistics(self, shaping: JobShaping) -> dict[str, Any]:
        samples = []
        generated = kept_tokens = 0
        for run in self.prompts:
            row = []
            for c in run.candidates:
                length = c.relay.length if c.relay is not None else 0
                generated += length
                kept_tokens += length if c.fate == KEPT else 0
                row.append({"sample": c.sample, "tokens": length, "fate": c.fate,
                            "finish_reason": c.relay.finish_reason if c.relay else None,
                            "draws": c.draws})  # fmt: skip
            samples.append(row)
        fates = [s["fate"] for row in samples for s in row]
        return {
            "group": self.request.group_id or self.group_id,
            "policy": self.request.policy,
            "group_size": self.request.group_size,
            "prompts": len(self.prompts),
            **plan_summary(self.plan),
            "seed": self.seed,
            "kept": fates.count(KEPT),
            "dropped": fates.count(DROPPED),
            "aborted": fates.count(ABORTED_BY_GROUP),
            "lost": fates.count(LOST),
            "generated_tokens": generated,
            "kept_tokens": kept_tokens,
            "seconds": round(time.monotonic() - self.started, 6),
            "first_kept_s": None if self.first_kept_s is None else round(self.first_kept_s, 6),
            "samples": samples,
            "next": shaping.describe([p.prompt_id for p in self.request.prompts]),
        }


class GroupService:
    """The endpoint: parse, plan, run, answer (streamed or whole)."""

    def __init__(self, forwarder: Forwarder, pool: WorkerPool, models: tuple[str, ...]) -> None:
        self.forwarder = forwarder
        self.pool = pool
        self.models = models
        self.book = ShapingBook()
        self.running: set[GroupRun] = set()

    async def serve(self, job: str, body: Any, receive: Receive, send: Send) -> None:
        request = parse_group(body, self.models)
        shaping = self.book.of(job)
        plan = shaping.plan(request)
        events: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        kept: list[dict[str, Any]] = []

        def emit(event: dict[str, Any]) -> None:
            if request.stream:
                events.put_nowait(event)
            elif event["type"] == "sample.kept":
                kept.append(event)

        run = GroupRun(self.forwarder, job, request, plan, emit,
                       seed=request.seed if request.seed is not None
                       else random.randrange(2**31))  # fmt: skip
        self.running.add(run)
        driver = asyncio.ensure_future(run.run())
        watcher = asyncio.ensure_future(receive())  # answers only when the client leaves
        watcher.add_done_callback(lambda done: None if done.cancelled() else driver.cancel())
        driver.add_done_callback(lambda done: events.put_nowait(None))
        try:
            if request.stream:
                await self._stream(run, plan, events, send)
            else:
                await asyncio.wait({driver})
            if driver.cancelled():
                return  # the client left: every candidate was aborted
            driver.result()
            if run.failure is None:
                shaping.observe(request, run.outcomes(), workers=len(self.pool.available()))
            stats = run.statistics(shaping)
            await self._finish(run, stats, kept, request.stream, send)
        finally:
            watcher.cancel()
            if not driver.done():
                driver.cancel()
            self.running.discard(run)

    async def _stream(
        self,
        run: GroupRun,
        plan: BatchPlan,
        events: asyncio.Queue[dict[str, Any] | None],
        send: Send,
    ) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        planned = {"type": "group.planned", "group": run.request.group_id or run.group_id,
                   **plan_summary(plan)}  # fmt: skip
        await send({"type": "http.response.body", "body": sse_event(planned), "more_body": True})
        while (event := await events.get()) is not None:
            chunk = [sse_event(event)]
            while not events.empty():  # what piled up goes out as one write
                queued = events.get_nowait()
                if queued is None:
                    events.put_nowait(None)
                    break
                chunk.append(sse_event(queued))
            await send({"type": "http.response.body", "body": b"".join(chunk), "more_body": True})

    async def _finish(
        self,
        run: GroupRun,
        stats: dict[str, Any],
        kept: list[dict[str, Any]],
        stream: bool,
        send: Send,
    ) -> None:
        failure = run.failure
        if stream:
            if failure is None:
                last = {"type": "group.complete", "statistics": stats}
            else:
                last = {"type": "group.error", "error": _error(failure), "statistics": stats}
            body = sse_event(last) + b"data: [DONE]\n\n"
            await send({"type": "http.response.body", "body": body, "more_body": False})
            return
        if failure is not None:
            headers = [(b"retry-after", b"1")] if failure.retryable else None
            error = _error(failure)
            await send_json(send, failure.status,
                            {"errors": [{"field": failure.field, "reason": failure.reason}],
                             "error": error, "statistics": stats}, headers)  # fmt: skip
            return
        await send_json(send, 200, {"group": stats["group"], "samples": kept, "statistics": stats})


def plan_summary(plan: BatchPlan) -> dict[str, Any]:
    """``M_total``, ``M'_i`` and the tail-pruned prompts (darts Alg. 1, Alg. 2 line 3)."""
    return {
        "total_budget": plan.total_budget,
        "allocations": [int(a) for a in plan.allocations],
        "pruned_prompts": [int(i) for i, pruned in enumerate(plan.shortest_only) if pruned],
    }


def _error(failure: GroupFailure) -> dict[str, Any]:
    return {"message": failure.reason, "type": "server_error" if failure.retryable
            else "invalid_request_error", "param": failure.field, "code": failure.code,
            "retryable": failure.retryable}  # fmt: skip
