"""Serializer fields with the bounds the database needs (so nothing valid here fails there)."""

from __future__ import annotations

import math
from typing import Any

from rest_framework import serializers

# PostgreSQL integer / bigint ranges.
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


class FiniteFloatField(serializers.FloatField):
    """A float that is finite (DRF's FloatField accepts "nan" and "inf")."""

    def to_internal_value(self, data: Any) -> float:
        value = super().to_internal_value(data)
        if not math.isfinite(value):
            raise serializers.ValidationError("must be a finite number")
        return value


def bounded_int(
    *, minimum: int = 0, maximum: int = INT32_MAX, **kwargs: Any
) -> serializers.IntegerField:
    return serializers.IntegerField(min_value=minimum, max_value=maximum, **kwargs)
