"""The sgl-router cache-aware policy as slime and verl* use it."""

from __future__ import annotations

from workers.sim.llm.routing import CacheAwareConfig, CacheAwareRouter


def route(router: CacheAwareRouter, trajectory: str, tokens: int, loads: list[int]) -> int:
    return router.route(
        trajectory=trajectory,
        prompt=trajectory.split("-")[0],
        prompt_tokens=100,
        request_tokens=tokens,
        loads=loads,
    )


def test_a_trajectory_follows_its_prefix_while_loads_are_balanced() -> None:
    router = CacheAwareRouter(3, CacheAwareConfig())
    assert route(router, "p0-s0", 100, [0, 0, 0]) == 0
    # 100 of 400 tokens known (0.25 <= 0.3): a miss, to the smallest tree
    assert route(router, "p0-s0", 400, [1, 1, 1]) == 1
    assert router.decisions["cache_miss"] == 2
    # 400 of 600 known on worker 1: a hit
    assert route(router, "p0-s0", 600, [1, 1, 1]) == 1
    assert router.decisions["cache_hit"] == 1


def test_a_miss_goes_to_the_smallest_tree() -> None:
    router = CacheAwareRouter(2, CacheAwareConfig())
    route(router, "p0-s0", 1_000, [0, 0])
    assert route(router, "p1-s0", 50, [0, 0]) == 1


def test_siblings_share_the_prompt_prefix() -> None:
    router = CacheAwareRouter(2, CacheAwareConfig())
    first = route(router, "p0-s0", 100, [0, 0])
    assert route(router, "p0-s1", 100, [0, 0]) == first


def test_imbalance_sends_the_step_to_the_least_loaded_worker() -> None:
    slime_like = CacheAwareRouter(2, CacheAwareConfig(balance_abs_threshold=0))
    first = route(slime_like, "p0-s0", 100, [0, 0])
    loads = [0, 0]
    loads[first] = 2
    assert route(slime_like, "p0-s0", 200, loads) != first
    default = CacheAwareRouter(2, CacheAwareConfig())  # abs threshold 64: not imbalanced
    first = route(default, "p0-s0", 100, [0, 0])
    loads = [0, 0]
    loads[first] = 2
    assert route(default, "p0-s0", 200, loads) == first
    assert default.imbalanced([100, 10]) and not default.imbalanced([60, 10])
