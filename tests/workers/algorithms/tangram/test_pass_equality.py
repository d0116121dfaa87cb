"""The pass's speed-ups change no decision: random queues (cold bursts, then a steady state of
completions and arrivals; both estimates, three candidate caps) start the same actions on the
same units and cores in every pass as under the pass before them. Exact to the float: where two
trials tie, the float sums decide, so a shortcut must keep every sum and its order."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest

from workers.algorithms.tangram.action import ActionSpec, Elasticity, ResourceDemand
from workers.algorithms.tangram.scheduler import ElasticScheduler
from workers.algorithms.tangram.topology import CpuNodeSpec, CpuTopology


def _action(rng: random.Random, number: int) -> ActionSpec:
    if rng.random() < 0.2:  # an environment step: one core, no profile
        return ActionSpec(f"a{number}", {"cpu": ResourceDemand.exactly(1)}, tool="env")
    return ActionSpec(
        f"a{number}",
        {"cpu": ResourceDemand.between(rng.choice([1, 1, 2]), rng.choice([8, 16, 32]))},
        tool="reward",
        key_resource="cpu",
        elasticity=Elasticity.amdahl(rng.uniform(0.6, 0.99), 32),
        t1=rng.lognormvariate(2.5, 1.0),
    )


def _decisions(seed: int, rest_model: str, cap: int | None, steps: int) -> list[object]:
    """Each pass's starts (id, units, cores) over a cold burst and then a steady state."""
    rng = random.Random(seed)
    scheduler = ElasticScheduler(
        CpuTopology([CpuNodeSpec.uniform("n0", 48, 2, memory_mb=1 << 20)]),
        rest_model=rest_model,
        candidate_cap=cap,
        estimate_window=rng.choice([None, 24]),
    )
    number = 0
    for _ in range(rng.randint(20, 60)):
        scheduler.submit(_action(rng, number), 0.0)
        number += 1
    decisions: list[object] = []
    running: list[str] = []
    now = 0.0
    for _ in range(steps):
        out = scheduler.schedule(now)
        while scheduler.next_wakeup(now) == now:
            out += scheduler.schedule(now)
        decisions.append([(a.action_id, dict(a.units), list(a.core_ids)) for a in out])
        running.extend(a.action_id for a in out)
        now += rng.uniform(0.0, 2.0)
        if running:
            scheduler.complete(running.pop(rng.randrange(len(running))), now)
        for _ in range(rng.choice([0, 1, 1, 2])):
            scheduler.submit(_action(rng, number), now)
            number += 1
    return decisions


CASES = [(seed, rest_model) for rest_model in ("efficient", "minimum") for seed in range(8)]
# sha256 of each case's decisions (``_digest``) under the pass as it was before its speed-ups
# (commit 429e7ca), recorded by running this module's ``_digest`` on that tree
BEFORE: dict[str, str] = json.loads(
    (Path(__file__).parent / "pass_decisions_before.json").read_text()
)


def _digest(seed: int, rest_model: str) -> str:
    cap = [None, 32, 6][seed % 3]
    decisions = _decisions(seed, rest_model, cap, steps=60)
    assert any(decisions), "the queues started nothing: the comparison would be empty"
    return hashlib.sha256(json.dumps(decisions).encode()).hexdigest()


@pytest.mark.parametrize(("seed", "rest_model"), CASES)
def test_the_pass_decides_as_before_its_speed_ups(seed: int, rest_model: str) -> None:
    assert _digest(seed, rest_model) == BEFORE[f"{rest_model}-{seed}"]


if __name__ == "__main__":  # record the digests (run from the tree being recorded)
    print(json.dumps({f"{m}-{s}": _digest(s, m) for s, m in CASES}, indent=1, sort_keys=True))
