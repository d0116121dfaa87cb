"""The demo's live workload: AI-coding trajectories whose actions really run on this machine.

Each trajectory writes a small Python project into its sandbox, alternates "LLM thinking" (a
pause) with tool actions — short shell commands there — and ends with its reward: the project's
test suite run as an elastic action (``pytest -n {dop}``, arl-tangram §2.2), whose pass rate
becomes the trajectory's reward and the action's score. Actions go through the same services as
the REST API, so the scheduler, the agent and the dashboard see ordinary traffic.
"""

from __future__ import annotations

import asyncio
import logging
import random
from concurrent.futures import ThreadPoolExecutor

from django.utils import timezone

from apps.actions.models import Action
from apps.actions.notify import get_notifier
from apps.actions.services import ActionSpec, action_submit
from apps.core.demand import parse_demand
from apps.jobs.models import Job
from apps.resources.models import ResourcePool, Tool
from apps.trajectories.models import Trajectory, TrajectoryStatus
from apps.trajectories.services import trajectory_create
from workers.demo.projects import parse_suite, suite_command, write_command

log = logging.getLogger("loom.demo")

SUITE_TOOL = "pytest-suite"
SHELL_TOOL = "shell"
# E(m) of a pytest-xdist suite measured on small suites: worker start-up makes it sub-linear.
SUITE_EFFICIENCY = [1.0, 0.85, 0.7, 0.6]
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


class DemoWorkload:
    def __init__(
        self,
        *,
        job: Job,
        pool: ResourcePool,
        concurrent_trajectories: int = 3,
        think_seconds: tuple[float, float] = (0.5, 2.0),
        seed: int = 7,
    ) -> None:
        self.job = job
        self.pool = pool
        self.concurrent = concurrent_trajectories
        self.think_seconds = think_seconds
        self.random = random.Random(seed)
        self.finished_trajectories = 0
        # Each trajectory's wait for its action holds a thread of its own, never one of the
        # event loop's default threads that the rest of the process needs.
        self._waiters = ThreadPoolExecutor(concurrent_trajectories, thread_name_prefix="demo-wait")

    async def run(self, stop: asyncio.Event) -> None:
        await asyncio.to_thread(ensure_demo_tools, self.pool)
        slots = [
            asyncio.create_task(self._trajectory_loop(stop, i)) for i in range(self.concurrent)
        ]
        await stop.wait()
        for slot in slots:
            slot.cancel()
        await asyncio.gather(*slots, return_exceptions=True)

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
        for command in steps:
            await asyncio.sleep(self.random.uniform(*self.think_seconds))
            await self._run(trajectory, SHELL_TOOL, command, {"cpu": 1}, None, None)
        suite = await self._run(
            trajectory,
            SUITE_TOOL,
            suite_command(),
            {"cpu": {"min": 1, "max": len(SUITE_EFFICIENCY)}},
            {"resource": "cpu", "efficiency": SUITE_EFFICIENCY},
            0.4 * tests,
        )
        await asyncio.to_thread(self._record_reward, trajectory, suite, len(steps) + 1)
        self.finished_trajectories += 1

    @staticmethod
    def _record_reward(trajectory: Trajectory, suite: Action, steps: int) -> None:
        """The suite's pass rate is the reward (0 when it did not run): on the trajectory, and as
        the reward action's score."""
        score = parse_suite(suite.output).score if suite.status == "succeeded" else 0.0
        Action.objects.filter(pk=suite.pk).update(score=score)
        Trajectory.objects.filter(pk=trajectory.pk).update(
            status=TrajectoryStatus.FINISHED,
            steps=steps,
            reward=score,
            finished_at=timezone.now(),
        )
        if suite.status != "succeeded":
            log.warning("demo reward action %s ended %s: %s", suite.pk, suite.status, suite.output)

    async def _run(
        self,
        trajectory: Trajectory,
        tool_name: str,
        command: str,
        demand: dict[str, object],
        elasticity: dict[str, object] | None,
        single_unit_duration_s: float | None,
    ) -> Action:
        def submit_and_wait() -> Action:
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
            action = action_submit(job=self.job, spec=spec).action
            with get_notifier().subscribe(action.pk) as subscription:
                for _ in range(int(tool.timeout_s) + 60):
                    action.refresh_from_db(fields=["status"])
                    if action.is_terminal:
                        break
                    subscription.wait(1.0)
            action.refresh_from_db()
            return action

        return await asyncio.get_running_loop().run_in_executor(self._waiters, submit_and_wait)
