"""Trigger primitives against artos §4.2 / Table 3 semantics."""

from __future__ import annotations

from collections import defaultdict

import pytest

from workers.algorithms.artos import (
    BufferEvent,
    DataKeyTrigger,
    EventKind,
    ObjectKeyTrigger,
    TimeTrigger,
    TransferTrigger,
    TriggerError,
)


class FakeView:
    """A tiny buffer view: step counters per (actor, key) and object versions."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = defaultdict(int)
        self.versions: dict[str, int] = defaultdict(int)
        self.order: list[str] = []

    def steps(self, actor: str, key: str) -> int:
        return self.counts[(actor, key)]

    def actors(self) -> list[str]:
        return list(self.order)

    def object_version(self, key: str) -> int:
        return self.versions[key]

    def write(self, actor: str, key: str, steps: int, now: float = 0.0) -> BufferEvent:
        if actor not in self.order:
            self.order.append(actor)
        self.counts[(actor, key)] += steps
        return BufferEvent(EventKind.DATA, now, actor=actor, key=key)

    def put_object(self, key: str, now: float = 0.0) -> BufferEvent:
        self.versions[key] += 1
        return BufferEvent(EventKind.OBJECT, now, key=key)


def test_full_batch_update_fires_once_all_actors_collected():
    view, trigger = FakeView(), DataKeyTrigger(n=3, size=4, keys=("obs", "reward"))
    fired = []
    for actor in ("a", "b", "c"):
        fired += trigger.check(view, view.write(actor, "obs", 4))
        assert fired == []  # rewards missing
    for actor in ("a", "b"):
        assert trigger.check(view, view.write(actor, "reward", 4)) == []
    fired = trigger.check(view, view.write("c", "reward", 4, now=7.0))
    assert len(fired) == 1
    assert fired[0]["actors"] == {"a": (0, 4), "b": (0, 4), "c": (0, 4)}
    assert fired[0]["at"] == 7.0
    # the same data never fires twice
    assert trigger.check(view, view.write("a", "obs", 0)) == []


def test_fifo_training_serves_actors_in_arrival_order():
    view, trigger = FakeView(), DataKeyTrigger(n=1, size=2, keys="obs")
    order = []
    for actor in ("b", "a", "c", "a"):
        for firing in trigger.check(view, view.write(actor, "obs", 2)):
            order.append((list(firing["actors"]), firing["actors"]))
    assert [names for names, _ in order] == [["b"], ["a"], ["c"], ["a"]]
    assert order[-1][1] == {"a": (2, 4)}


def test_data_key_trigger_catches_up_on_a_large_write():
    view, trigger = FakeView(), DataKeyTrigger(n=1, size=2, keys="obs")
    fired = trigger.check(view, view.write("a", "obs", 5))
    assert [f["actors"]["a"] for f in fired] == [(0, 2), (2, 4)]


def test_reset_discards_partial_data_of_a_killed_actor():
    view, trigger = FakeView(), DataKeyTrigger(n=2, size=4, keys="obs")
    trigger.check(view, view.write("a", "obs", 3))  # killed mid-sample
    trigger.check(view, BufferEvent(EventKind.RESET, 1.0, actor="a"))
    trigger.check(view, view.write("b", "obs", 4))
    assert trigger.check(view, view.write("a", "obs", 1)) == []  # 3 discarded + 1 fresh
    fired = trigger.check(view, view.write("a", "obs", 3))
    assert fired[0]["actors"] == {"b": (0, 4), "a": (3, 7)}


def test_pipeline_training_two_triggers_on_disjoint_keys():
    view = FakeView()
    pre = DataKeyTrigger(n=2, size=8, keys=("next_obs", "reward"))
    rest = DataKeyTrigger(n=2, size=8, keys=("obs", "action"))
    log = []
    for actor in ("a", "b"):
        for key in ("next_obs", "reward", "obs", "action"):
            event = view.write(actor, key, 8)
            log += [("pre", f["at"]) for f in pre.check(view, event)]
            log += [("rest", f["at"]) for f in rest.check(view, event)]
    assert [name for name, _ in log] == ["pre", "rest"]


def test_object_key_trigger_fires_once_per_new_version():
    view, trigger = FakeView(), ObjectKeyTrigger("model_param")
    assert trigger.check(view, view.put_object("noise_scale")) == []
    first = trigger.check(view, view.put_object("model_param", now=1.0))
    assert first == [{"trigger": "object_key", "key": "model_param", "version": 1, "at": 1.0}]
    assert trigger.check(view, BufferEvent(EventKind.OBJECT, 2.0, key="model_param")) == []
    assert trigger.check(view, view.put_object("model_param"))[0]["version"] == 2


def test_time_trigger_fires_once_per_period_and_never_in_bursts():
    view, trigger = FakeView(), TimeTrigger(period=2.0)
    times = [0.0, 1.0, 1.99, 2.0, 3.0, 10.0, 11.0, 12.0]
    fired = [t for t in times if trigger.check(view, BufferEvent(EventKind.TICK, t))]
    assert fired == [2.0, 10.0, 12.0]


def test_transfer_trigger_sends_stages_in_order():
    view, trigger = FakeView(), TransferTrigger([("next_obs", "reward"), ("obs", "action")], 4)
    assert trigger.check(view, view.write("a", "obs", 4)) == []  # stage 1 waits for stage 0
    assert trigger.check(view, view.write("a", "action", 4)) == []
    assert trigger.check(view, view.write("a", "reward", 4)) == []
    fired = trigger.check(view, view.write("a", "next_obs", 4))
    assert [(f["stage"], f["keys"], f["start"], f["stop"]) for f in fired] == [
        (0, ["next_obs", "reward"], 0, 4),
        (1, ["obs", "action"], 0, 4),
    ]
    assert fired[-1]["last_stage"]


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: DataKeyTrigger(0, 1, "obs"), "n"),
        (lambda: DataKeyTrigger(1, -3, "obs"), "size"),
        (lambda: DataKeyTrigger(1, 1, ()), "keys"),
        (lambda: DataKeyTrigger(1, 1, ("obs", "obs")), "keys"),
        (lambda: ObjectKeyTrigger(""), "key"),
        (lambda: TimeTrigger(0), "period"),
        (lambda: TimeTrigger(float("nan")), "period"),
        (lambda: TransferTrigger("obs"), "keys"),
        (lambda: TransferTrigger(["obs", ("obs", "reward")]), "keys"),
    ],
)
def test_bad_parameters_name_the_field(make, field):
    with pytest.raises(TriggerError, match=rf"^{field}"):
        make()
