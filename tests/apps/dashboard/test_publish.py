from typing import Any

from channels.layers import get_channel_layer

from apps.dashboard.live.broadcast import SnapshotThrottle, apublish


def test_throttle_sends_first_then_holds_the_latest_until_due() -> None:
    throttle = SnapshotThrottle(min_interval_s=0.25)
    assert throttle.offer("pool:cpu", {"n": 1}, now=0.0)
    assert not throttle.offer("pool:cpu", {"n": 2}, now=0.1)
    assert not throttle.offer("pool:cpu", {"n": 3}, now=0.2)
    assert throttle.due(now=0.2) == []
    assert throttle.due(now=0.3) == [("pool:cpu", {"n": 3})]
    assert throttle.due(now=1.0) == []
    # Topics are independent.
    assert throttle.offer("pool:gpu", {"n": 1}, now=0.3)


def test_throttle_bounds_the_rate_under_a_flood() -> None:
    throttle = SnapshotThrottle(min_interval_s=0.25)
    sent = 0
    for step in range(10_000):  # 10 s of 1 000 offers per second
        now = step / 1000
        sent += throttle.offer("pool:cpu", {"step": step}, now=now)
        sent += len(throttle.due(now))
    assert 38 <= sent <= 41  # ≈ 4 per second


async def test_apublish_reaches_the_layer_group_with_topic_and_data() -> None:
    layer: Any = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add("loom.pool.cpu", channel)
    await apublish("pool:cpu", {"waiting": 3})
    message = await layer.receive(channel)
    assert message == {"type": "dashboard.event", "topic": "pool:cpu", "data": {"waiting": 3}}
    await layer.group_discard("loom.pool.cpu", channel)
