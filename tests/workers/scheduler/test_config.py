"""The service's configuration chooses the Tangram pass settings of the scheduler it builds, and
refuses a bad one naming the setting."""

from __future__ import annotations

from typing import Any

import pytest

from tests.workers.scheduler.memory_store import MemoryStore
from workers.algorithms.tangram.scheduler import DEFAULT_CANDIDATE_CAP
from workers.scheduler.config import ServiceConfig
from workers.scheduler.ledger import Counters
from workers.scheduler.policy import PolicyTracker
from workers.scheduler.recovery import pool_state_load
from workers.threads import InlineCalls


async def _built(config: ServiceConfig) -> Any:
    rebuilt = await pool_state_load(
        config=config,
        store=MemoryStore(),
        calls=InlineCalls(),
        clock=lambda: 0.0,
        counters=Counters(),
        policy=PolicyTracker(config.pool),
    )
    return rebuilt.state.scheduler


async def test_the_default_configuration_builds_the_default_scheduler() -> None:
    scheduler = await _built(ServiceConfig(pool="cpu"))
    assert scheduler.rest_model == "efficient"
    assert scheduler.candidate_cap == DEFAULT_CANDIDATE_CAP


@pytest.mark.parametrize(("rest_model", "cap"), [("minimum", None), ("efficient", 7)])
async def test_the_configured_settings_reach_the_scheduler(
    rest_model: str, cap: int | None
) -> None:
    scheduler = await _built(ServiceConfig(pool="cpu", rest_model=rest_model, candidate_cap=cap))
    assert (scheduler.rest_model, scheduler.candidate_cap) == (rest_model, cap)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("rest_model", "fastest"),
        ("rest_model", None),
        ("candidate_cap", 0),
        ("candidate_cap", -3),
        ("candidate_cap", 2.5),
        ("candidate_cap", True),
        ("candidate_cap", "32"),
    ],
)
def test_a_bad_setting_is_refused_naming_it(field: str, value: Any) -> None:
    settings: dict[str, Any] = {field: value}
    with pytest.raises(ValueError, match=f"^{field}: "):
        ServiceConfig(pool="cpu", **settings)
