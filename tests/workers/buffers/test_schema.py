"""Typed records: wrong shapes and dtypes are rejected naming the field."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from workers.buffers.schema import FieldSpec, Schema, SchemaError, tokens

SCHEMA = Schema(
    {
        "obs": FieldSpec((4, 84, 84), "uint8"),
        "reward": FieldSpec((), "float32"),
        "prompt": tokens(max_len=6),
    }
)


def test_numpy_torch_and_tokens_are_accepted():
    count, arrays = SCHEMA.validate(
        {
            "obs": np.zeros((3, 4, 84, 84), np.uint8),
            "reward": torch.tensor([1.0, 2.0, 3.0]),
            "prompt": [[1, 2], torch.tensor([3, 4, 5]), np.array([], np.int64)],
        }
    )
    assert count == 3
    assert arrays["reward"].dtype == np.float32
    assert arrays["prompt"].tolist()[1] == [3, 4, 5, 0, 0, 0]
    assert arrays["prompt.length"].tolist() == [2, 3, 0]


@pytest.mark.parametrize(
    ("batch", "field", "reason"),
    [
        ({"obs": np.zeros((3, 4, 84, 83), np.uint8)}, "obs", "shape"),
        ({"obs": np.zeros((3, 4, 84, 84), np.float32)}, "obs", "dtype"),
        ({"reward": np.zeros(3, np.float64)}, "reward", "dtype"),
        ({"reward": [1.0, 2.0]}, "reward", "numpy array"),
        ({"prompt": [[1] * 7]}, "prompt", "tokens"),
        ({"prompt": [[1.5]]}, "prompt", "integer"),
        ({"action": np.zeros(3)}, "action", "not a key"),
        (
            {"obs": np.zeros((3, 4, 84, 84), np.uint8), "reward": np.zeros(2, np.float32)},
            "reward",
            "steps",
        ),
    ],
)
def test_bad_records_name_the_field(batch, field, reason):
    with pytest.raises(SchemaError, match=rf"^{field}: .*{reason}"):
        SCHEMA.validate(batch)


def test_bad_schemas_name_the_field():
    with pytest.raises(SchemaError, match=r"^x: unknown dtype"):
        Schema({"x": FieldSpec((1,), "floaty")})
    with pytest.raises(SchemaError, match=r"^t: a token field needs max_len"):
        Schema({"t": FieldSpec((None,), "int32")})
    with pytest.raises(SchemaError, match=r"^x: shape"):
        Schema({"x": {"shape": [0], "dtype": "float32"}})


def test_schema_round_trips_through_json():
    again = Schema(SCHEMA.to_json())
    assert again.to_json() == SCHEMA.to_json()
