"""The SGLang router's cache-aware policy, as slime and verl* route every step (heddle §7).

sgl-router ``src/policies/cache_aware.rs``: the router keeps an approximate radix tree of the
request texts it sent to each worker (it never sees the workers' real caches or evictions).

- If the load is imbalanced — ``max − min > balance_abs_threshold`` and
  ``max > balance_rel_threshold · min`` over the router's in-flight counts — the request goes to
  the least-loaded worker (shortest queue).
- Otherwise it goes to the worker whose tree matches the longest prefix of the request, if that
  match covers more than ``cache_threshold`` of the request; else to the worker with the smallest
  tree ("most available cache space").
- Either way the request text is inserted into the chosen worker's tree.

An agentic step's request text is the trajectory's whole context, so a worker's tree matches a
step of a trajectory it served before up to that earlier request's length, and the first step of
any sample of a prompt it served before up to the prompt's length.

Defaults (sgl-router CLI, policies/mod.rs): ``cache_threshold`` 0.3, ``balance_abs_threshold``
64, ``balance_rel_threshold`` 1.5. slime starts the router with ``balance_abs_threshold=0``
(slime ``slime/ray/rollout.py`` ``_start_router``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

SGL_ROUTER_CACHE_THRESHOLD = 0.3
SGL_ROUTER_BALANCE_ABS = 64
SGL_ROUTER_BALANCE_REL = 1.5


@dataclass(frozen=True)
class CacheAwareConfig:
    cache_threshold: float = SGL_ROUTER_CACHE_THRESHOLD
    balance_abs_threshold: float = SGL_ROUTER_BALANCE_ABS
    balance_rel_threshold: float = SGL_ROUTER_BALANCE_REL


class CacheAwareRouter:
    """One router over ``workers`` workers; ``route`` is called with the workers' current loads."""

    def __init__(self, workers: int, config: CacheAwareConfig) -> None:
        self.config = config
        self._trajectory_prefix: list[dict[str, int]] = [{} for _ in range(workers)]
        self._prompt_prefix: list[dict[str, int]] = [{} for _ in range(workers)]
        self.tree_tokens = [0] * workers
        self.decisions = {"imbalanced": 0, "cache_hit": 0, "cache_miss": 0}

    def imbalanced(self, loads: Sequence[int]) -> bool:
        high, low = max(loads), min(loads)
        return (
            high - low > self.config.balance_abs_threshold
            and high > self.config.balance_rel_threshold * low
        )

    def _match(self, worker: int, trajectory: str, prompt: str, prompt_tokens: int) -> int:
        own = self._trajectory_prefix[worker].get(trajectory, 0)
        shared = prompt_tokens if prompt in self._prompt_prefix[worker] else 0
        return max(own, shared)

    def route(
        self,
        *,
        trajectory: str,
        prompt: str,
        prompt_tokens: int,
        request_tokens: int,
        loads: Sequence[int],
    ) -> int:
        if self.imbalanced(loads):
            choice = min(range(len(loads)), key=lambda w: (loads[w], w))
            self.decisions["imbalanced"] += 1
        else:
            matches = [self._match(w, trajectory, prompt, prompt_tokens) for w in range(len(loads))]
            best = max(matches)
            if request_tokens > 0 and best / request_tokens > self.config.cache_threshold:
                # equal matches: the tree returns one of them; we take the least loaded
                choice = min(
                    (w for w in range(len(loads)) if matches[w] == best),
                    key=lambda w: (loads[w], w),
                )
                self.decisions["cache_hit"] += 1
            else:
                choice = min(range(len(loads)), key=lambda w: (self.tree_tokens[w], w))
                self.decisions["cache_miss"] += 1
        self._insert(choice, trajectory, prompt, prompt_tokens, request_tokens)
        return choice

    def _insert(
        self, worker: int, trajectory: str, prompt: str, prompt_tokens: int, tokens: int
    ) -> None:
        known = self._match(worker, trajectory, prompt, prompt_tokens)
        self.tree_tokens[worker] += max(tokens - known, 0)
        prefixes = self._trajectory_prefix[worker]
        prefixes[trajectory] = max(prefixes.get(trajectory, 0), tokens)
        self._prompt_prefix[worker][prompt] = prompt_tokens
