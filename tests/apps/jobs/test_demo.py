"""``manage.py demo`` as a fresh checkout runs it: the demo workload's reward suites pass with
real scores, elastic reward actions really run on more than one core, its LLM turns really
generate through the router on the CPU engine (the tokens reach the trajectory rows), and its
reward model and teacher serve as GPU services (CPU stand-in devices).

The same code as the command (``_set_up`` through ``call_command``, then ``embedded_demo``: the
embedded runtime with its sandboxed local agent and the workload), with a fresh ``var/`` and the
sandboxes outside the repository, as on a machine that never ran Loom before.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from apps.actions.models import TERMINAL_STATUSES, Action
from apps.embedded.demo_workload import SHELL_TOOL, SUITE_TOOL
from apps.embedded.management.commands.demo import embedded_demo
from apps.trajectories.models import Trajectory, TrajectoryStatus
from workers.demo.projects import parse_suite

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.processes,
    pytest.mark.timeout(300),
]

REPOSITORY = Path(__file__).resolve().parents[3]
ENOUGH_SUITES = 4
DEADLINE_S = 200.0


def _ended(tool: str) -> list[Action]:
    return list(Action.objects.filter(tool__name=tool, status__in=TERMINAL_STATUSES).order_by("pk"))


def _wide(action: Action) -> bool:
    return len((action.allocation or {}).get("cores") or []) > 1


async def test_demo_reward_suites_pass_with_real_scores_on_more_than_one_core(
    tmp_path: Path, settings: Any
) -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one usable core: no elastic action can run on more than one")
    settings.VAR_DIR = str(tmp_path / "var")
    settings.LOOM_SANDBOX_ROOT = tmp_path / "sandboxes"
    assert not Path(settings.LOOM_SANDBOX_ROOT).resolve().is_relative_to(REPOSITORY)
    await asyncio.to_thread(call_command, "demo", "--no-serve", stdout=io.StringIO())

    async with embedded_demo(
        workload=True, concurrent_trajectories=2, think_seconds=(0.05, 0.3)
    ) as (runtime, demo):
        assert demo is not None
        assert all(agent.backend.sandboxed for agent in runtime.agents if hasattr(agent, "backend"))
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            suites = await asyncio.to_thread(_ended, SUITE_TOOL)
            if len(suites) >= ENOUGH_SUITES and any(_wide(a) for a in suites):
                break
            await asyncio.sleep(0.5)

    suites = await asyncio.to_thread(_ended, SUITE_TOOL)
    shells = await asyncio.to_thread(_ended, SHELL_TOOL)
    assert len(suites) >= ENOUGH_SUITES, [(a.status, a.output) for a in suites]
    for action in [*suites, *shells]:
        assert action.status == "succeeded", (action.command[:80], action.status, action.output)
    for action in suites:
        result = parse_suite(action.output)
        assert result.failed == 0 and result.passed >= 5, action.output  # 4-16 tests + 1
        assert result.cores == len((action.allocation or {})["cores"]), action.output
    # the workload scores a suite as it sees it end; one ending as the runtime stops stays unscored
    scored_suites = [a.score for a in suites if a.score is not None]
    assert len(scored_suites) >= len(suites) - 2 and set(scored_suites) == {1.0}, scored_suites
    wide = [a for a in suites if _wide(a)]
    assert wide, [a.allocation for a in suites]
    generated = await asyncio.to_thread(
        lambda: list(Trajectory.objects.filter(tokens__gt=0).values_list("tokens", "llm_worker"))
    )
    assert generated and all(worker for _, worker in generated), generated
    served = await asyncio.to_thread(
        lambda: list(
            Action.objects.filter(service__isnull=False, status__in=TERMINAL_STATUSES).values_list(
                "service__name", "status", "output"
            )
        )
    )
    assert {name for name, _, _ in served} == {"reward-model", "teacher"}, served
    assert all(status == "succeeded" for _, status, _ in served), served
    scored = await asyncio.to_thread(
        lambda: list(
            Action.objects.filter(service__name="reward-model", status="succeeded").values_list(
                "score", "output"
            )
        )
    )
    assert all(score == json.loads(output)["scores"][0] for score, output in scored), scored
    assert any((parse_suite(a.output).cores or 0) > 1 for a in wide)  # seen from inside
    rewards = await asyncio.to_thread(
        lambda: list(
            Trajectory.objects.filter(status=TrajectoryStatus.FINISHED).values_list(
                "reward", flat=True
            )
        )
    )
    assert rewards and all(reward == 1.0 for reward in rewards), rewards
