import re

import pytest

from apps.dashboard.live.groups import InvalidTopic, TopicKind, topic_parse


@pytest.mark.parametrize(
    ("raw", "kind", "key"),
    [
        ("pool:cpu", TopicKind.POOL, "cpu"),
        ("node:17", TopicKind.NODE, "17"),
        ("job:3", TopicKind.JOB, "3"),
    ],
)
def test_valid_topics_parse_and_map_to_legal_layer_groups(
    raw: str, kind: TopicKind, key: str
) -> None:
    topic = topic_parse(raw)
    assert (topic.kind, topic.key, str(topic)) == (kind, key, raw)
    # Channel layers accept only [A-Za-z0-9._-] names shorter than 100 characters.
    assert re.fullmatch(r"[A-Za-z0-9._-]{1,99}", topic.layer_group)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("cpu", "must look like"),
        ("queue:cpu", "unknown group kind"),
        ("job:abc", "positive integer"),
        ("node:0", "positive integer"),
        ("pool:bad name!", "not a valid pool name"),
        (42, "must be a string"),
    ],
)
def test_invalid_topics_are_refused_with_a_reason(raw: object, reason: str) -> None:
    with pytest.raises(InvalidTopic, match=reason):
        topic_parse(raw)
