"""The service's in-memory bookkeeping without any I/O: losses retry until the attempts run out,
deadlines end silent attempts, stale results and repeated cancels change nothing."""

from __future__ import annotations

from dataclasses import replace

from workers.algorithms.tangram import CpuNodeSpec, CpuTopology, ElasticScheduler
from workers.scheduler.config import ServiceConfig
from workers.scheduler.ledger import ActionLedger, Batch, Counters
from workers.scheduler.records import ActionRecord
from workers.transport import ActionResult

NODE = "node-a"


def _ledger(max_attempts: int = 2) -> ActionLedger:
    topology = CpuTopology([CpuNodeSpec.uniform(NODE, cores=4, numa_nodes=1, memory_mb=4096)])
    config = ServiceConfig(pool="cpu", max_attempts=max_attempts, result_grace_s=5.0)
    return ActionLedger(ElasticScheduler(topology), config=config, counters=Counters())


def _record(action_id: int, **fields: object) -> ActionRecord:
    record = ActionRecord(
        action_id=action_id,
        job_id=1,
        kind="cpu",
        demand={"cpu": {"min": 1, "max": 1}},
        submitted_at=0.0,
        command="true",
        timeout_s=10.0,
    )
    return replace(record, **fields)  # type: ignore[arg-type]


def _started(ledger: ActionLedger, *records: ActionRecord, now: float = 1.0) -> None:
    for record in records:
        ledger.submit(record, now)
    started, scheduled = ledger.start_pass(now, lambda assignment: assignment.node)
    assert [update.action_id for update in scheduled] == [r.action_id for r in records]
    assert all(attempt == 1 for _, _, attempt in started)


def test_a_lost_attempt_is_retried_then_failed_when_attempts_run_out() -> None:
    ledger = _ledger(max_attempts=2)
    _started(ledger, _record(1))
    batch = Batch()
    ledger.lose(ledger.active["1"], batch, 2.0, "agent gone")
    assert [update.action_id for update in batch.requeued] == [1]
    assert ledger.active["1"].record.attempts == 1 and ledger.active["1"].node is None
    ledger.start_pass(3.0, lambda assignment: assignment.node)
    assert ledger.active["1"].attempt == 2
    ledger.lose(ledger.active["1"], batch, 4.0, "agent gone again")
    assert "1" not in ledger.active
    (failed,) = batch.finished
    assert failed.status == "failed" and "after 2 attempts" in failed.reason


def test_only_idempotent_actions_leave_a_silent_node() -> None:
    ledger = _ledger()
    _started(ledger, _record(1, idempotent=True), _record(2))
    batch = Batch()
    ledger.lose_idempotent_on(NODE, batch, 2.0)
    assert [update.action_id for update in batch.requeued] == [1]
    assert ledger.active["2"].node == NODE  # waits for its node's answer


def test_a_deadline_ends_the_attempt_timed_out_or_lost() -> None:
    ledger = _ledger()
    _started(ledger, _record(1), _record(2))
    batch = Batch()
    ledger.check_deadlines(batch, 100.0, live_nodes=set())
    assert {update.status for update in batch.finished} == {"failed"}
    assert [node for node, _ in batch.cancels] == [NODE, NODE]
    ledger = _ledger()
    _started(ledger, _record(3))
    batch = Batch()
    ledger.check_deadlines(batch, 100.0, live_nodes={NODE})
    assert [update.status for update in batch.finished] == ["timed_out"]


def test_a_stale_result_changes_nothing_and_a_cancel_is_sent_once() -> None:
    ledger = _ledger()
    _started(ledger, _record(1))
    batch = Batch()
    stale = ActionResult(action_id="1", attempt=7, node_id=NODE, status="succeeded")
    ledger.on_result(stale, batch, 2.0)
    assert "1" in ledger.active and not batch.finished
    ledger.on_cancelled([1], batch, 2.0)
    ledger.on_cancelled([1], batch, 2.0)
    assert len(batch.cancels) == 1
    ledger.on_result(replace(stale, attempt=1, status="cancelled"), batch, 3.0)
    assert "1" not in ledger.active and ledger.counters.completed == 1


def test_heartbeats_mark_an_attempt_running_once() -> None:
    ledger = _ledger()
    _started(ledger, _record(1))
    assert ledger.newly_running(["1:1", "1:2", "9:1"]) == [1]
    assert ledger.newly_running(["1:1"]) == []


def test_a_demand_the_pool_never_meets_fails_at_the_next_housekeeping() -> None:
    ledger = _ledger()
    ledger.submit(_record(1, demand={"cpu": {"min": 64, "max": 64}}), 1.0)
    (failed,) = ledger.drain_orphans()
    assert failed.action_id == 1 and failed.status == "failed" and failed.reason
    assert "1" not in ledger.active


def test_a_pass_follows_a_capped_scheduler_pass_at_once() -> None:
    ledger = _ledger()
    ledger.scheduler.candidate_cap = 1  # each scheduler pass admits one candidate
    _started(ledger, _record(1), _record(2), _record(3))
