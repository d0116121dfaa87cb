"""The regime sweep of ``tangram_cpu``: where elastic DoP beats the best fixed DoP, and where not.

The grid, the batch each point runs and the "reward-heavy regime" are fixed in this module
before any point was run (never chosen from results); the original calibration of
``AiCodingParams`` is one point of the grid. Axes:

- reward share: env turns per trajectory (every trajectory ends with one reward), i.e. the
  fraction of actions that are rewards (and, with it, the rewards' share of the work);
- reward median T1: 15-120 s of single-core test-suite time;
- burstiness: the spread of trajectory starts; 2 s is one synchronized GRPO batch (the
  original calibration), 120 s is close to a steady stream of arrivals.

Every point runs elastic (Alg. 1), elastic with the paper's Alg. 2 estimate (every remaining
action at one core: the scheduler's ``rest_model="minimum"``, the default until the priced
estimate replaced it), fixed DoP 4, 8, 16 and 32 (the §6.4 baseline, the scheduler's
"fixed-dop" policy) on the same trace, and the lower bound (no queueing, best DoP).
The best fixed DoP is chosen per point by its mean ACT (an oracle no single fixed setting has);
``best_fixed_over_elastic`` > 1 means elastic is faster. ``headroom`` (best fixed / lower bound)
bounds what any scheduler could gain over the best fixed DoP at that point.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import math
import statistics
from typing import Any

from bench._tangram_cpu_sim import CORES_PER_NODE, FIXED_DOPS, run_tangram
from workers.sim.tangram.baselines import lower_bound
from workers.sim.tangram.results import SimResult
from workers.sim.tangram.trace import Trace
from workers.sim.tangram.workloads import AiCodingParams, ai_coding_trace

# name: (turns_min, turns_max) of env turns before the reward.
REWARD_SHARES: dict[str, tuple[int, int]] = {
    "env_heavy": (8, 24),  # the original calibration: about 1 action in 17 is a reward
    "balanced": (2, 6),  # about 1 in 5
    "reward_heavy": (0, 2),  # about 1 in 2
}
REWARD_MEDIANS_S = (15.0, 30.0, 60.0, 120.0)
BURSTINESS: dict[str, float] = {  # name: start jitter (s) of the batch's trajectories
    "synchronized": 2.0,  # the original calibration
    "staggered": 30.0,
    "spread": 120.0,
}
QUICK_REWARD_SHARES = ("env_heavy", "reward_heavy")
QUICK_REWARD_MEDIANS_S = (30.0, 120.0)
QUICK_BURSTINESS = ("synchronized", "spread")
# Every point runs the paper's batch on the paper's pool (batch 1 280 on 5 x 256 cores, §6.2);
# --quick runs batch 256 on one node (the same load per node).
FULL_BATCH = 1280
QUICK_BATCH = 256
REWARD_HEAVY = "reward_heavy"
# elastic with the scheduler's rest_model="minimum": Alg. 2's estimate as the paper prints it
PAPER_ESTIMATE = "elastic_paper_estimate"
REGIME_DEFINITION = (
    "reward-heavy regime = every point whose reward share is 'reward_heavy' (0-2 env turns: "
    "about half of all actions are rewards), at every reward median and burstiness; its target "
    "is the geometric mean of best_fixed_over_elastic over those points"
)


@dataclasses.dataclass(frozen=True)
class SweepPoint:
    reward_share: str
    reward_median_s: float
    burstiness: str

    def params(self) -> AiCodingParams:
        turns_min, turns_max = REWARD_SHARES[self.reward_share]
        return dataclasses.replace(
            AiCodingParams(),
            turns_min=turns_min,
            turns_max=turns_max,
            reward_median_s=self.reward_median_s,
            start_jitter_s=BURSTINESS[self.burstiness],
        )

    @property
    def original(self) -> bool:
        return self.params() == AiCodingParams()

    @property
    def reward_heavy(self) -> bool:
        return self.reward_share == REWARD_HEAVY


def grid(quick: bool) -> list[SweepPoint]:
    shares = QUICK_REWARD_SHARES if quick else tuple(REWARD_SHARES)
    medians = QUICK_REWARD_MEDIANS_S if quick else REWARD_MEDIANS_S
    bursts = QUICK_BURSTINESS if quick else tuple(BURSTINESS)
    return [SweepPoint(s, m, b) for s, m, b in itertools.product(shares, medians, bursts)]


def grid_params(quick: bool) -> dict[str, Any]:
    """The grid as ``params`` records it."""
    return {
        "reward_shares_turns": {
            name: list(REWARD_SHARES[name])
            for name in (QUICK_REWARD_SHARES if quick else REWARD_SHARES)
        },
        "reward_medians_s": list(QUICK_REWARD_MEDIANS_S if quick else REWARD_MEDIANS_S),
        "burstiness_start_jitter_s": {
            name: BURSTINESS[name] for name in (QUICK_BURSTINESS if quick else BURSTINESS)
        },
        "batch": QUICK_BATCH if quick else FULL_BATCH,
        "fixed_dops": list(FIXED_DOPS),
        "seed": 0,
        "reward_heavy_regime": REGIME_DEFINITION,
        "points": len(grid(quick)),
    }


def trace_shape(trace: Trace) -> dict[str, float]:
    """What the point's trace is, before anything runs on it."""
    actions = [a for t in trace.trajectories for a in t.actions()]
    rewards = [a for a in actions if a.kind == "reward"]
    return {
        "actions": len(actions),
        "reward_action_share": len(rewards) / len(actions),
        "reward_work_share": sum(a.t1 for a in rewards) / sum(a.t1 for a in actions),
    }


def _brief(result: SimResult, dops: bool = False) -> dict[str, Any]:
    """The figures a point keeps per approach; the rewards' queueing and execution apart (the
    mechanism behind a DoP choice), and with ``dops`` how many rewards ran at each DoP."""
    summary = result.summary()
    rewards = [r for r in result.records if r.kind == "reward"]
    brief = {
        "mean_act_s": summary["mean_act_s"],
        "p99_act_s": summary["p99_act_s"],
        "mean_act_by_kind_s": summary["mean_act_by_kind_s"],
        "mean_queue_s": summary["mean_queue_s"],
        "reward_mean_queue_s": statistics.fmean(r.started - r.submitted for r in rewards),
        "reward_mean_execution_s": statistics.fmean(r.finished - r.started for r in rewards),
        "makespan_s": summary["makespan_s"],
    }
    if dops:
        counts = collections.Counter(r.dop for r in rewards)
        brief["reward_dop_counts"] = {str(d): counts[d] for d in sorted(counts)}
    return brief


def run_point(
    point: SweepPoint, batch: int, nodes: int, cores: int = CORES_PER_NODE
) -> dict[str, Any]:
    trace = ai_coding_trace(batch, seed=0, params=point.params())
    approaches = {"elastic": _brief(run_tangram(trace, nodes, cores, "elastic"), dops=True)}
    # the paper's estimate (every remaining action at one core), the default before
    minimum = run_tangram(trace, nodes, cores, "elastic", rest_model="minimum")
    approaches[PAPER_ESTIMATE] = _brief(minimum, dops=True)
    for dop in FIXED_DOPS:
        approaches[f"fixed_dop_{dop}"] = _brief(run_tangram(trace, nodes, cores, "fixed-dop", dop))
    approaches["lower_bound"] = _brief(lower_bound(trace, {"cpu": cores}))
    best_dop = min(FIXED_DOPS, key=lambda d: (approaches[f"fixed_dop_{d}"]["mean_act_s"], d))
    best = approaches[f"fixed_dop_{best_dop}"]["mean_act_s"]
    elastic = approaches["elastic"]["mean_act_s"]
    return {
        **dataclasses.asdict(point),
        "original_calibration": point.original,
        "reward_heavy_regime": point.reward_heavy,
        "batch": batch,
        "nodes": nodes,
        "cores_per_node": cores,
        "trace": trace_shape(trace),
        "approaches": approaches,
        "best_fixed_dop": best_dop,
        "best_fixed_mean_act_s": best,
        "elastic_over_best_fixed": elastic / best,
        "best_fixed_over_elastic": best / elastic,
        "best_fixed_over_elastic_paper_estimate": best / approaches[PAPER_ESTIMATE]["mean_act_s"],
        "headroom_best_fixed_over_lower_bound": best / approaches["lower_bound"]["mean_act_s"],
    }


def run_sweep(quick: bool, nodes: int) -> list[dict[str, Any]]:
    batch = QUICK_BATCH if quick else FULL_BATCH
    return [run_point(point, batch, nodes) for point in grid(quick)]


def geometric_mean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def summarise(points: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures the targets read, and where elastic wins or loses."""
    gains = [p["best_fixed_over_elastic"] for p in points]
    heavy = [p for p in points if p["reward_heavy_regime"]]
    worst = min(points, key=lambda p: p["best_fixed_over_elastic"])
    paper = [p["best_fixed_over_elastic_paper_estimate"] for p in points]
    paper_heavy = [p["best_fixed_over_elastic_paper_estimate"] for p in heavy]
    return {
        "paper_estimate": {
            "reward_heavy_geomean_best_fixed_over_elastic": geometric_mean(paper_heavy),
            "all_points_min_best_fixed_over_elastic": min(paper),
            "points_elastic_ahead": sum(1 for g in paper if g > 1.0),
            "points_default_estimate_better": sum(
                1
                for p in points
                if p["best_fixed_over_elastic"] > p["best_fixed_over_elastic_paper_estimate"]
            ),
        },
        "reward_heavy_geomean_best_fixed_over_elastic": geometric_mean(
            [p["best_fixed_over_elastic"] for p in heavy]
        ),
        "reward_heavy_min_best_fixed_over_elastic": min(
            p["best_fixed_over_elastic"] for p in heavy
        ),
        "reward_heavy_geomean_headroom": geometric_mean(
            [p["headroom_best_fixed_over_lower_bound"] for p in heavy]
        ),
        "all_points_min_best_fixed_over_elastic": min(gains),
        "all_points_geomean_best_fixed_over_elastic": geometric_mean(gains),
        "worst_point": {k: worst[k] for k in ("reward_share", "reward_median_s", "burstiness")},
        "points_elastic_ahead": sum(1 for g in gains if g > 1.0),
        "points_elastic_below_0_95": sum(1 for g in gains if g < 0.95),
        "best_fixed_dop_counts": {
            str(d): sum(1 for p in points if p["best_fixed_dop"] == d) for d in FIXED_DOPS
        },
    }
