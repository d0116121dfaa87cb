"""The embedded router follows the routing policy an operator sets on the Rollouts page."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from apps.embedded.llm import DatabasePolicyStore, EmbeddedLlm
from apps.trajectories.router_control import router_policy_set

pytestmark = pytest.mark.django_db(transaction=True)


async def test_the_store_answers_the_rows_policy_as_the_router_reads_it() -> None:
    store = DatabasePolicyStore("router")
    assert await store.get("any key") is None
    await asyncio.to_thread(
        router_policy_set, router="router", policy="least_load", predictor="prompt_history",
        user=None,
    )  # fmt: skip
    stored = await store.get("any key")
    assert stored is not None and '"policy": "least_load"' in stored
    assert await DatabasePolicyStore("another").get("any key") is None


async def test_a_policy_set_while_serving_is_adopted(settings: Any, tmp_path: Path) -> None:
    settings.VAR_DIR = str(tmp_path)  # the tiny model is written here
    llm = EmbeddedLlm(port=0, slots=1)
    await llm.start()
    try:
        assert llm.router is not None
        assert llm.router.forwarder.policy.name == "heddle"
        await asyncio.to_thread(
            router_policy_set, router=llm.router.name, policy="round_robin",
            predictor="prompt_history", user=None,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while llm.router.forwarder.policy.name != "round_robin" and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert llm.router.forwarder.policy.name == "round_robin"
    finally:
        await llm.stop()
