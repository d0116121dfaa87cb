"""Actions run for real: API → scheduler service → local CPU agent → result, in one process.

The embedded runtime (the demo's process tree) with the in-process transport, the real Django
store and a real local-backend agent executing shell commands on this machine's cores
(the ``loom`` fixture, ``conftest.py``).
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from apps.actions.models import Action
from workers.transport.messages import DEFAULT_OUTPUT_CAP_BYTES

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


async def test_submitted_actions_run_and_report_act(loom: Any) -> None:
    client, _ = loom
    actions = await client.submit_batch(
        [
            {"command": "echo hello-$((6 * 7))", "demand": {"cpu": 1}},
            {"command": "exit 3", "demand": {"cpu": 1}},
            {"command": "sleep 30", "demand": {"cpu": 1}, "timeout_s": 1},
        ]
    )
    ok, failed, slow = [await client.result(a.id, timeout=60) for a in actions]
    assert (ok.status, ok.exit_code, ok.output.strip()) == ("succeeded", 0, "hello-42")
    assert ok.timings.act_s is not None and ok.timings.act_s > 0
    assert ok.timings.queueing_s is not None and ok.timings.queueing_s >= 0
    assert (failed.status, failed.exit_code) == ("failed", 3)
    assert "exit_code_nonzero" in failed.error_reason
    assert slow.status == "timed_out" and "timeout" in slow.error_reason


async def test_elastic_command_gets_the_allocated_cores(loom: Any) -> None:
    client, _ = loom
    action = await client.submit(
        tool="suite",
        demand={"cpu": {"min": 1, "max": 2}},
        elasticity={"resource": "cpu", "efficiency": [1.0, 0.9]},
        single_unit_duration_s=2.0,
    )
    done = await client.result(action.id, timeout=60)
    assert done.status == "succeeded"
    assert done.output.strip() == f"dop={len(done.allocation['cores'])}"
    assert len(done.allocation["cores"]) == 2  # an idle pool gives an elastic action every core


async def test_cancel_stops_a_running_action(loom: Any) -> None:
    client, runtime = loom
    action = await client.submit(command="sleep 30", demand={"cpu": 1})
    for _ in range(200):
        if (await client.get(action.id)).status in ("scheduled", "running"):
            break
        await asyncio.sleep(0.05)
    cancelled = await client.cancel(action.id)
    assert cancelled.status == "cancelled"
    service = runtime.services["cpu"]
    for _ in range(200):  # the agent kills it and the scheduler frees its core
        if service.scheduler.running_count == 0:
            break
        await asyncio.sleep(0.05)
    assert service.scheduler.running_count == 0
    row = await asyncio.to_thread(Action.objects.get, pk=action.id)
    assert row.status == "cancelled"


async def test_oversized_output_and_orphaned_children_end_cleanly(loom: Any) -> None:
    """Through the whole path: output beyond the cap is cut with a reason; a command that forks
    and leaves children ends, and nothing it started is left running."""
    client, runtime = loom
    marker = f"60.{uuid.uuid4().int % 10**9:09d}"  # a sleep duration no other process uses
    big, forking = await client.submit_batch(
        [
            {"command": "head -c 300000 /dev/zero | tr '\\0' x", "demand": {"cpu": 1}},
            {
                "command": f"(sleep {marker} &) ; (sleep {marker} &) ; echo parent-done",
                "demand": {"cpu": 1},
            },
        ]
    )
    big_done = await client.result(big.id, timeout=60)
    assert big_done.status == "succeeded", big_done.error_reason
    assert "output_truncated" in big_done.error_reason
    assert 0 < len(big_done.output) <= DEFAULT_OUTPUT_CAP_BYTES
    forked = await client.result(forking.id, timeout=60)
    assert forked.output.strip() == "parent-done"
    assert forked.status == "succeeded", forked.error_reason
    assert _sleeps_for(marker) == []
    assert runtime.services["cpu"].scheduler.running_count == 0


def _sleeps_for(duration: str) -> list[int]:
    """Live ``sleep DURATION`` processes (a /proc scan)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv[:2] == [b"sleep", duration.encode()]:
                found.append(int(entry.name))
    return found


async def test_run_submits_and_waits_in_one_request(loom: Any) -> None:
    client, _ = loom
    requests: list[httpx.Request] = []

    async def record(request: httpx.Request) -> None:
        requests.append(request)

    client._http.event_hooks["request"].append(record)
    done = await client.run(command="echo one-request", demand={"cpu": 1}, timeout=60)
    assert (done.status, done.output.strip()) == ("succeeded", "one-request")
    assert done.timings.act_s is not None and done.timings.act_s > 0
    assert len(requests) == 1 and requests[0].method == "POST"
