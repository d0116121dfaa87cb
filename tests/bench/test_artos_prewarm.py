"""bench artos_prewarm's loop: the one PPO learner (workers.algorithms.artos.ppo) trains the PPO
actor program's policy from the elastic actors' batches, every invocation's start-up recorded."""

from __future__ import annotations

import pytest

from bench import artos_prewarm

pytest.importorskip("gymnasium")
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("mode", ["on_demand", "prewarm"])
def test_the_loop_trains_with_the_shared_ppo_learner(mode, tmp_path):
    actors = ["actor0", "actor1"]
    result = artos_prewarm.run_mode(mode, actors, steps=64, iterations=6, workdir=tmp_path)
    rows = result["iterations"]
    assert [row["iteration"] for row in rows] == list(range(6))
    assert result["prepare_s"] > 0
    for row in rows:
        assert len(row["waits_s"]) == len(actors)
        assert all(wait is not None and wait >= 0 for wait in row["waits_s"])
        assert all(restore is not None for restore in row["restore_s"])
    returns = [row["mean_episode_return"] for row in rows if row["mean_episode_return"]]
    assert returns and all(r >= 1 for r in returns)  # episodes ended and were counted
