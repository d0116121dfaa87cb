"""The demo's live workload: AI-coding trajectories whose actions really run on this machine.

Each trajectory writes a small Python project into its sandbox, alternates LLM turns with tool
actions — short shell commands there — and ends with its reward: the project's test suite run as
an elastic action (``pytest -n {dop}``, arl-tangram §2.2), whose pass rate becomes the
trajectory's reward and the action's score. Actions go through the same services as the REST
API, so the scheduler, the agent and the dashboard see ordinary traffic. An LLM turn is real
generation through Loom's router (``LlmEndpoint``: the embedded CPU engine, OpenAI's chat API
with the trajectory named in ``X-Loom-Trajectory``, long-tailed lengths), or a pause without one.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
from django.utils import timezone

from apps.actions.models import Action
from apps.actions.notify import get_notifier
from apps.actions.service_checks import service_default_demand
from apps.actions.services import ActionSpec, action_submit
from apps.buffers.dataplane import BufferServiceRefused, BufferServiceUnavailable
from apps.buffers.experience import records_push
from apps.buffers.models import Buffer
from apps.core.demand import parse_demand
from apps.jobs.models import Job
from apps.resources.models import ResourcePool, Service, Tool
from apps.trajectories.models import Trajectory, TrajectoryStatus
from apps.trajectories.services import trajectory_create
from workers.demo.projects import parse_suite, suite_command, write_command

log = logging.getLogger("loom.demo")

DEMO_BUFFER_NAME = "rollouts"  # the experience buffer the demo declares (manage.py demo)
SUITE_TOOL = "pytest-suite"
SHELL_TOOL = "shell"
# E(m) of a pytest-xdist suite measured on small suites: worker start-up makes it sub-linear.
SUITE_EFFICIENCY = [1.0, 0.85, 0.7, 0.6]
LLM_TURN_MEDIAN_TOKENS = 96  # output lengths are log-normal around this (long-tailed, heddle §2)
LLM_TURN_MAX_TOKENS = 1024
SHELL_STEPS = (
    "ls -la > listing.txt && wc -l listing.txt",
    "python3 -c 'print(sum(i * i for i in range(200_000)))'",
    "grep -c def *.py 2>/dev/null || echo 0",
)


def ensure_demo_tools(pool: ResourcePool) -> None:
    Tool.objects.get_or_create(
        name=SUITE_TOOL,
        defaults={
            "pool": pool,
            "resource_template": {"cpu": {"min": 1, "max": len(SUITE_EFFICIENCY)}},
            "elasticity": {"resource": "cpu", "efficiency": SUITE_EFFICIENCY},
            "timeout_s": 300.0,
            "idempotent": True,
            "description": "run a project's test suite on {dop} cores (elastic reward)",
        },
    )
    Tool.objects.get_or_create(
        name=SHELL_TOOL,
        defaults={
            "pool": pool,
            "resource_template": {"cpu": 1},
            "timeout_s": 60.0,
            "description": "a short shell command in the trajectory's sandbox",
        },
    )


@dataclass(frozen=True)
class LlmEndpoint:
    """Where the workload's LLM turns go: a router's base URL, the job's key, the model id."""

    url: str
    api_key: str
    model: str


class DemoWorkload:
    def __init__(
        self,
        *,
        job: Job,
        pool: ResourcePool,
        concurrent_trajectories: int = 3,
        think_seconds: tuple[float, float] = (0.5, 2.0),
        seed: int = 7,
        llm: LlmEndpoint | None = None,
        gpu_pool: ResourcePool | None = None,
    ) -> None:
        self.job = job
        self.pool = pool
        self.gpu_pool = gpu_pool
        self.llm = llm
        self._http: httpx.AsyncClient | None = None
        self.concurrent = concurrent_trajectories
        self.think_seconds = think_seconds
        self.random = random.Random(seed)
        self.finished_trajectories = 0
        # Each trajectory's wait for its action holds a thread of its own, never one of the
        # event loop's default threads that the rest of the process needs.
        self._waiters = ThreadPoolExecutor(concurrent_trajectories, thread_name_prefix="demo-wait")
        # Set when the workload stops: a waiter thread gives up its action's wait within a
        # second, so the process exits at once on Ctrl-C instead of joining waits for actions
        # that the stopped runtime will never end.
        self._stopping = threading.Event()

    async def run(self, stop: asyncio.Event) -> None:
        await asyncio.to_thread(ensure_demo_tools, self.pool)
        if self.llm is not None:
            headers = {"Authorization": f"Bearer {self.llm.api_key}"}
            self._http = httpx.AsyncClient(base_url=self.llm.url, headers=headers, timeout=120)
        slots = [
            asyncio.create_task(self._trajectory_loop(stop, i)) for i in range(self.concurrent)
        ]
        try:
            await stop.wait()
        finally:
            self._stopping.set()
            for slot in slots:
                slot.cancel()
            await asyncio.gather(*slots, return_exceptions=True)
            self._waiters.shutdown(wait=False, cancel_futures=True)
            if self._http is not None:
                await self._http.aclose()

    async def _trajectory_loop(self, stop: asyncio.Event, slot: int) -> None:
        while not stop.is_set():
            try:
                await self._one_trajectory(slot)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("demo trajectory failed; starting another")
                await asyncio.sleep(2)

    async def _one_trajectory(self, slot: int) -> None:
        index = self.finished_trajectories * self.concurrent + slot
        tests = self.random.choice((4, 8, 16))
        trajectory = await asyncio.to_thread(
            trajectory_create,
            job=self.job,
            prompt_id=f"demo-{index % 8}",
            status=TrajectoryStatus.TOOL_CALL,
        )
        steps = [write_command(tests=tests, rounds_per_test=6)]  # the rollout writes its code
        steps += self.random.sample(SHELL_STEPS, k=2)
        for turn, command in enumerate(steps):
            await self._think(trajectory, turn, command)
            await self._run(trajectory, SHELL_TOOL, command, {"cpu": 1}, None, None)
        suite = await self._run(
            trajectory,
            SUITE_TOOL,
            suite_command(),
            {"cpu": {"min": 1, "max": len(SUITE_EFFICIENCY)}},
            {"resource": "cpu", "efficiency": SUITE_EFFICIENCY},
            0.4 * tests,
        )
        score = await asyncio.to_thread(self._score_suite, suite)
        if self.gpu_pool is not None:  # the GPU services score the rollout (arl-tangram §5.3)
            for service in ("reward-model", "teacher"):
                await self._serve(trajectory, service, tests)
        if self._http is not None:  # the router forgets it; its rows keep the final state
            await self._http.post(f"/v1/loom/trajectories/{trajectory.pk}/end")
        await asyncio.to_thread(self._record_reward, trajectory, score, len(steps) + 1)
        await asyncio.to_thread(self._push_experience, slot, trajectory.pk, score, len(steps) + 1)
        self.finished_trajectories += 1

    async def _think(self, trajectory: Trajectory, turn: int, command: str) -> None:
        """One LLM turn before a tool call: generation through the router, else a pause."""
        if self._http is None or self.llm is None:
            await asyncio.sleep(self.random.uniform(*self.think_seconds))
            return
        length = self.random.lognormvariate(math.log(LLM_TURN_MEDIAN_TOKENS), 1.0)
        body = {
            "model": self.llm.model,
            "messages": [
                {"role": "system", "content": "You are a coding agent. Call one tool per turn."},
                {"role": "user", "content": f"turn {turn}: next step for the project"},
            ],
            "max_tokens": max(1, min(LLM_TURN_MAX_TOKENS, round(length))),
            "ignore_eos": True,  # random weights: the length above, not an early </s>
            "seed": self.random.randrange(1 << 31),
        }
        headers = {"X-Loom-Trajectory": str(trajectory.pk)}
        answer = await self._http.post("/v1/chat/completions", json=body, headers=headers)
        answer.raise_for_status()

    @staticmethod
    def _score_suite(suite: Action) -> float:
        """The suite's pass rate (0 when it did not run) is the reward action's score, recorded as
        soon as the suite ends."""
        score = parse_suite(suite.output).score if suite.status == "succeeded" else 0.0
        Action.objects.filter(pk=suite.pk).update(score=score)
        if suite.status != "succeeded":
            log.warning("demo reward action %s ended %s: %s", suite.pk, suite.status, suite.output)
        return score

    def _push_experience(self, slot: int, trajectory_id: int, reward: float, steps: int) -> None:
        """The finished trajectory into the demo's experience buffer (artos §4), as a trainer's
        actor would push it; a buffer service that is not there skips it (logged)."""
        buffer = Buffer.objects.filter(job=self.job, name=DEMO_BUFFER_NAME).first()
        if buffer is None:
            return
        tokens = Trajectory.objects.filter(pk=trajectory_id).values_list("tokens", flat=True)
        records = {"reward": [reward], "tokens": [tokens.first() or 0], "steps": [steps]}
        try:
            records_push(buffer=buffer, actor=f"slot-{slot}", records=records)
        except (BufferServiceUnavailable, BufferServiceRefused) as error:
            log.warning("demo experience not buffered: %s", error)

    @staticmethod
    def _record_reward(trajectory: Trajectory, score: float, steps: int) -> None:
        """The suite's score is the trajectory's reward, once its GPU services have run."""
        Trajectory.objects.filter(pk=trajectory.pk).update(
            status=TrajectoryStatus.FINISHED,
            steps=steps,
            reward=score,
            finished_at=timezone.now(),
        )

    async def _serve(self, trajectory: Trajectory, service_name: str, tests: int) -> Action:
        """A GPU service action on the trajectory's token ids (a stand-in for its transcript)."""
        ids = [[self.random.randrange(512) for _ in range(16 + 4 * tests)]]

        def submit() -> Action:
            service = Service.objects.get(name=service_name)
            assert self.gpu_pool is not None
            demand, elasticity = service_default_demand(service)
            spec = ActionSpec(
                demand=parse_demand(demand, elasticity),
                service_id=service.pk,
                pool_id=self.gpu_pool.pk,
                trajectory_id=trajectory.pk,
                request={"input_ids": ids},
                timeout_s=120.0,
            )
            return action_submit(job=self.job, spec=spec).action

        return await self._until_ended(submit, 180)

    async def _run(
        self,
        trajectory: Trajectory,
        tool_name: str,
        command: str,
        demand: dict[str, object],
        elasticity: dict[str, object] | None,
        single_unit_duration_s: float | None,
    ) -> Action:
        tool_timeout = await asyncio.to_thread(lambda: Tool.objects.get(name=tool_name).timeout_s)

        def submit() -> Action:
            tool = Tool.objects.get(name=tool_name)
            spec = ActionSpec(
                demand=parse_demand(demand, elasticity),
                tool_id=tool.pk,
                pool_id=self.pool.pk,
                trajectory_id=trajectory.pk,
                command=command,
                single_unit_duration_s=single_unit_duration_s,
                timeout_s=tool.timeout_s,
            )
            return action_submit(job=self.job, spec=spec).action

        return await self._until_ended(submit, int(tool_timeout) + 60)

    async def _until_ended(self, submit: Callable[[], Action], seconds: int) -> Action:
        """Submit (in a waiter thread) and wait for the action's end, at most ``seconds``."""

        def submit_and_wait() -> Action:
            action = submit()
            with get_notifier().subscribe(action.pk) as subscription:
                for _ in range(seconds):
                    action.refresh_from_db(fields=["status"])
                    if action.is_terminal or self._stopping.is_set():
                        break
                    subscription.wait(1.0)
            action.refresh_from_db()
            return action

        return await asyncio.get_running_loop().run_in_executor(self._waiters, submit_and_wait)
