"""The definition rules the API and the admin share (apps.buffers.rules)."""

from __future__ import annotations

from apps.buffers import rules
from workers.algorithms.artos import DataKeyTrigger, TimeTrigger, TransferTrigger

OBS = {"shape": [4], "dtype": "float32"}
SCHEMA = {"obs": OBS, "reward": {"shape": [], "dtype": "float32"}}


def test_schema_errors_name_the_key_and_its_part():
    assert rules.schema_errors(SCHEMA) == {}
    tokens = {"shape": [None], "dtype": "int32", "max_len": 16}
    assert rules.schema_errors({"ids": tokens}) == {}
    assert "schema" in rules.schema_errors({})
    assert set(rules.schema_errors({"obs": {"shape": [4], "dtype": "float31"}})) == {
        "schema.obs.dtype"
    }
    assert set(rules.schema_errors({"obs": {"shape": [0], "dtype": "float32"}})) == {
        "schema.obs.shape"
    }
    assert set(rules.schema_errors({"ids": {"shape": [None], "dtype": "int32"}})) == {"schema.ids"}
    assert set(rules.schema_errors({"ids": {"shape": [None], "dtype": "float32", "max_len": 4}}))
    assert set(rules.schema_errors({"obs": {**OBS, "colour": "red"}})) == {"schema.obs"}


def test_triggers_are_built_by_their_constructors():
    trigger = rules.build_trigger("data_key", {"n": 2, "size": 8, "keys": ["obs"]})
    assert isinstance(trigger, DataKeyTrigger) and (trigger.n, trigger.size) == (2, 8)
    assert isinstance(rules.build_trigger("time", {"period_s": 0.5}), TimeTrigger)
    transfer = rules.build_trigger("transfer", {"keys": [["obs"], "reward"], "size": 4})
    assert isinstance(transfer, TransferTrigger)
    assert transfer.stages == (("obs",), ("reward",))


def test_trigger_errors_name_the_parameter():
    ok = rules.trigger_errors("data_key", {"n": 1, "size": 4, "keys": ["obs"]}, "", SCHEMA)
    assert ok == {}
    assert set(rules.trigger_errors("data_key", {"n": 0, "size": 4, "keys": ["obs"]})) == {
        "params.n"
    }
    assert set(rules.trigger_errors("data_key", {"n": 1, "keys": ["obs"]})) == {"params.size"}
    assert set(rules.trigger_errors("time", {"period_s": -1})) == {"params.period_s"}
    assert set(rules.trigger_errors("time", {"period_s": True})) == {"params.period_s"}
    assert set(rules.trigger_errors("time", {"period": 1})) == {
        "params.period",
        "params.period_s",
    }
    unknown_key = rules.trigger_errors("transfer", {"keys": [["obs"], ["done"]]}, "", SCHEMA)
    assert "'done' is not a key" in unknown_key["params.keys"][0]
    assert set(rules.trigger_errors("object_key", {"key": "model_param"}, "http://x")) == {"target"}
    assert rules.trigger_errors("object_key", {"key": "model_param"}, "@actors") == {}
    assert set(rules.trigger_errors("sometimes", {})) == {"kind"}


def test_buffer_rules_and_defaults():
    assert set(rules.buffer_errors({"schema": SCHEMA, "capacity": -1})) == {"capacity"}
    on_policy_fifo = {"schema": SCHEMA, "capacity": 8, "eviction": "fifo", "sync_mode": "on_policy"}
    assert set(rules.buffer_errors(on_policy_fifo)) == {"eviction"}
    assert set(rules.buffer_errors({"eviction": "lru"})) == {"eviction"}

    values, errors = rules.with_defaults({"eviction": "fifo", "prioritised": True})
    assert errors == {}
    assert (values["sync_mode"], values["sampler"]) == ("off_policy", "prioritised")
    values, errors = rules.with_defaults({})
    assert (values["eviction"], values["sync_mode"], values["sampler"]) == (
        "keep_unsampled",
        "on_policy",
        "full_batch",
    )
    _, errors = rules.with_defaults({"prioritised": True, "sampler": "uniform"})
    assert set(errors) == {"sampler"}


def test_definition_errors_index_the_triggers():
    errors = rules.definition_errors(
        {"schema": SCHEMA, "capacity": 8},
        [
            {"name": "a", "kind": "data_key", "params": {"n": 1, "size": 2, "keys": ["obs"]}},
            {"name": "a", "kind": "data_key", "params": {"n": 1, "size": 2, "keys": ["act"]}},
        ],
    )
    assert set(errors) == {"triggers[1].name", "triggers[1].params.keys"}
