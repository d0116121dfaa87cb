"""Output serializers that build their fields once, not on every response.

A DRF serializer builds and binds its fields per instance (``ModelSerializer`` from the model's
metadata, each time): for the action's ~30 fields that costs more per response than the query
behind it. ``to_representation`` only reads its fields, so one bound instance per class can
represent every object, from any thread.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any, ClassVar

from rest_framework import serializers


class ReusedFieldsMixin:
    """``render(obj)`` / ``render_many(objs)``: ``Serializer(obj).data`` with fields built once.

    For output only, and only for serializers whose representation needs no ``context``.
    """

    _templates: ClassVar[dict[type, Any]] = {}
    _templates_lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def _template(cls) -> Any:
        template = cls._templates.get(cls)
        if template is None:
            with cls._templates_lock:
                template = cls._templates.get(cls)
                if template is None:
                    template = cls()
                    assert isinstance(template, serializers.Serializer)
                    template.fields  # noqa: B018  (build and bind them now, under the lock)
                    cls._templates[cls] = template
        return template

    @classmethod
    def render(cls, instance: Any) -> dict[str, Any]:
        return dict(cls._template().to_representation(instance))

    @classmethod
    def render_many(cls, instances: Iterable[Any]) -> list[dict[str, Any]]:
        template = cls._template()
        return [dict(template.to_representation(instance)) for instance in instances]
