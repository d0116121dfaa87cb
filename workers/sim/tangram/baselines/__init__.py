"""Baselines the paper compares ARL-Tangram with (arl-tangram §6.1, §6.3, §6.4), each a model.

Baselines that are only a different *policy* run through the same scheduler and topology code:

- fixed DoP 4 / 16 (§6.4, Fig. 9): ``ElasticScheduler(algorithm="fixed-dop", fixed_dop=4|16)``;
- ServerlessLLM-like load-on-demand (§6.3): the GPU topology with ``fixed-dop`` (no elastic
  reallocation) and a slower restore (``SERVERLESS_LOAD_MULTIPLIER``: it loads checkpoints from
  its own storage tier instead of restoring pinned CPU-memory copies, and §6.3 reports "higher
  system overhead").

Baselines that are a different *system* are simulated here on the same event loop:

- :func:`simulate_static_pods` — Kubernetes-like trajectory-level static provisioning (§6.1):
  one pod per trajectory, CPU request 0.5 / limit 4, held for the trajectory's whole life. Pods
  are created through a control plane of limited throughput and start after a fixed delay; an
  action runs inside its pod, and the node's cores are shared among running actions by CFS-like
  max-min fair sharing, each capped by the pod limit and the action's parallelism.
- :func:`simulate_isolated_services` — task-level isolated GPU services (SGLang-like, §6.1):
  each model on its own 4-GPU group with TP=4, always resident, FCFS, one request at a time.
- :func:`simulate_naive_api` — every trajectory calls the APIs directly and retries on a
  rate-limit error, at most three times, with exponential backoff (§6.1 DeepSearch baseline).
- :func:`lower_bound` — no queueing, best allocation: each action alone at its best DoP.
"""

from __future__ import annotations

from workers.sim.tangram.baselines.isolated_services import (
    SERVERLESS_LOAD_MULTIPLIER,
    simulate_isolated_services,
)
from workers.sim.tangram.baselines.lower_bound import lower_bound
from workers.sim.tangram.baselines.naive_api import RetryParams, simulate_naive_api
from workers.sim.tangram.baselines.static_pods import PodParams, simulate_static_pods

__all__ = [
    "SERVERLESS_LOAD_MULTIPLIER",
    "PodParams",
    "RetryParams",
    "lower_bound",
    "simulate_isolated_services",
    "simulate_naive_api",
    "simulate_static_pods",
]
