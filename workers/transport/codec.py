"""One codec for every wire message: frozen dataclasses ⇄ JSON-ready dicts, by their type hints.

A class's plan is worked out once from its fields and type hints (the first time it is encoded
or decoded) and reused for every message: encoding and decoding are on the transport's hot path.

Encoding copies each field value into a dict under the field's name, in field order, after
``"v"`` and ``"type"`` for a message (a class with a ``TYPE``); tuples become lists, dicts are
copied with integer keys written as strings, nested dataclasses become dicts. Decoding checks
the version and the type, requires the fields without a default, and converts what it reads
back to the hinted types: ``str``, ``int``, ``float``, ``bool``; ``X | None``; ``tuple[X, ...]``;
``dict[K, V]``; nested dataclasses, an empty or null one read as None. ``Literal``, ``Any`` and
``str | None`` are taken as they are (the class's ``__post_init__`` checks them). A field absent
from the dict takes its default. Anything that does not convert raises ``MessageError``.

Per field, ``wire(...)`` metadata may rename its key, require it although it has a default,
leave it out of the dict when empty, or give it a decoder of its own.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, Self, Union

SCHEMA_VERSION = 1

Convert = Callable[[Any], Any]

_SCALARS: dict[Any, Convert] = {str: str, int: int, float: float, bool: bool}
_WIRE = "wire"


class MessageError(ValueError):
    """A message that cannot be decoded: wrong version, unknown type, missing/invalid field."""


def wire(
    *,
    key: str | None = None,
    required: bool = False,
    omit_empty: bool = False,
    omit_none: bool = False,
    decode: Convert | None = None,
) -> dict[str, Any]:
    """A field's codec options, as ``dataclasses.field(metadata=wire(...))``. ``omit_empty``
    leaves out any false value; ``omit_none`` only None (an empty container is then said)."""
    options = {"key": key, "required": required, "omit_empty": omit_empty, "decode": decode}
    return {_WIRE: options | {"omit_none": omit_none}}


class WireRecord:
    """``to_dict``/``from_dict`` of a frozen dataclass through its plan; a subclass whose
    message needs a check across fields overrides ``from_dict`` and calls ``super()``."""

    def to_dict(self) -> dict[str, Any]:
        plan = _PLANS.get(type(self)) or plan_for(type(self))
        return plan.encode(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        plan = _PLANS.get(cls) or plan_for(cls)
        try:
            message: Self = plan.decode(data)
        except MessageError:
            raise
        except (TypeError, ValueError, AttributeError) as exc:
            raise MessageError(f"invalid {plan.label}: {exc}") from exc
        return message


class _Plan:
    """How one class is encoded and decoded, field by field."""

    def __init__(self, cls: type) -> None:
        hints = typing.get_type_hints(cls)
        fields = dataclasses.fields(cls)
        self.cls = cls
        self.type: str | None = getattr(cls, "TYPE", None)
        self.label = self.type or cls.__name__
        self.header: dict[str, Any] = (
            {"v": SCHEMA_VERSION, "type": self.type} if self.type is not None else {}
        )
        # (key, attribute, encoder or None)
        written: list[tuple[str, str, Convert | None]] = []
        omitted: list[str] = []
        omitted_if_none: list[str] = []
        # (attribute, key, required, decoder or None)
        decoders: list[tuple[str, str, bool, Convert | None]] = []
        for field in fields:
            options = field.metadata.get(_WIRE, {})
            key = options.get("key") or field.name
            hint = hints[field.name]
            written.append((key, field.name, _encoder(hint, top=True)))
            if options.get("omit_empty"):
                omitted.append(key)
            elif options.get("omit_none"):
                omitted_if_none.append(key)
            has_default = (
                field.default is not dataclasses.MISSING
                or field.default_factory is not dataclasses.MISSING
            )
            required = not has_default or bool(options.get("required"))
            decoders.append((field.name, key, required, options.get("decode") or _decoder(hint)))
        self._literal = _dict_display(self.header, written)
        self.omitted = tuple(omitted)
        self.omitted_if_none = tuple(omitted_if_none)
        self.decoders = tuple(decoders)

    def encode(self, record: Any) -> dict[str, Any]:
        data = self._literal(record)
        for key in self.omitted:
            if not data[key]:
                del data[key]
        for key in self.omitted_if_none:
            if data[key] is None:
                del data[key]
        return data

    def decode(self, data: dict[str, Any]) -> Any:
        if self.type is not None:
            _check_header(data, self.type)
        values: dict[str, Any] = {}
        for name, key, required, decode in self.decoders:
            if key in data:
                raw = data[key]
                values[name] = raw if decode is None else decode(raw)
            elif required:
                raise MessageError(f"field {key!r} is missing")
        return self.cls(**values)


_PLANS: dict[type, _Plan] = {}


def plan_for(cls: type) -> _Plan:
    """The class's plan, worked out on first use (its hints may name classes defined later)."""
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = _Plan(cls)
    return plan


def _dict_display(
    header: dict[str, Any], written: list[tuple[str, str, Convert | None]]
) -> Callable[[Any], dict[str, Any]]:
    """``record → {header..., key: encode(record.attribute), ...}`` compiled into one dict
    display, as ``dataclasses`` compiles ``__init__``: no loop over the fields per message."""
    namespace: dict[str, Any] = {}
    items = [f"{key!r}: {value!r}" for key, value in header.items()]
    for index, (key, attribute, encode) in enumerate(written):
        if not attribute.isidentifier():
            raise TypeError(f"the wire codec cannot name the field {attribute!r}")
        value = f"record.{attribute}"
        if encode is not None:
            namespace[f"_encode{index}"] = encode
            value = f"_encode{index}({value})"
        items.append(f"{key!r}: {value}")
    exec(f"def to_dict(record):\n    return {{{', '.join(items)}}}\n", namespace)
    to_dict: Callable[[Any], dict[str, Any]] = namespace["to_dict"]
    return to_dict


def _check_header(data: dict[str, Any], expected_type: str) -> None:
    version = data.get("v")
    if version != SCHEMA_VERSION:
        raise MessageError(f"unsupported schema version {version!r} (expected {SCHEMA_VERSION})")
    if data.get("type") != expected_type:
        raise MessageError(f"expected type {expected_type!r}, got {data.get('type')!r}")


def _optional(hint: Any) -> Any | None:
    """``X`` of ``X | None``, else None."""
    if typing.get_origin(hint) in (Union, types.UnionType):
        rest = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if len(rest) == 1:
            return rest[0]
        raise TypeError(f"the wire codec has no plan for {hint!r}")
    return None


def _encoder(hint: Any, *, top: bool = False) -> Convert | None:
    """How a value of ``hint`` is written; None: as it is. ``top``: a field's own container is
    always copied (the message stays frozen while a reader changes its dict)."""
    inner = _optional(hint)
    if inner is not None:
        encode = _encoder(inner, top=top)
        return None if encode is None else lambda value: None if value is None else encode(value)
    if dataclasses.is_dataclass(hint):
        nested = plan_for(typing.cast(type, hint))
        return nested.encode
    origin = typing.get_origin(hint)
    if origin in (tuple, list):
        element = _encoder(typing.get_args(hint)[0])
        if element is None:
            return list
        return lambda value: [element(item) for item in value]
    if origin is dict:
        key_type, value_type = typing.get_args(hint)
        value_encode = _encoder(value_type)
        if key_type is int or value_encode is not None:
            encode_value = value_encode or _same
            return lambda value: {str(name): encode_value(item) for name, item in value.items()}
        return dict if top else None
    _check_leaf(hint)
    return None


def _decoder(hint: Any) -> Convert | None:
    """How a value of ``hint`` is read back; None: as it is."""
    inner = _optional(hint)
    if inner is not None:
        if dataclasses.is_dataclass(inner):
            nested = plan_for(typing.cast(type, inner))
            return lambda value: nested.decode(value) if value else None
        if inner is str:
            return None  # optional text as it is: never a made-up string for a shell or a path
        decode = _decoder(inner)
        return None if decode is None else lambda value: None if value is None else decode(value)
    if dataclasses.is_dataclass(hint):
        return plan_for(typing.cast(type, hint)).decode
    origin = typing.get_origin(hint)
    if origin in (tuple, list):
        args = typing.get_args(hint)
        if origin is tuple and (len(args) != 2 or args[1] is not Ellipsis):
            raise TypeError(f"the wire codec has no plan for {hint!r}")
        element = _decoder(args[0])
        build = tuple if origin is tuple else list
        if element is None:
            return lambda value: build(value or ())
        return lambda value: build([element(item) for item in value or ()])
    if origin is dict:
        key_type, value_type = typing.get_args(hint)
        key_decode = _decoder(key_type) or _same
        value_decode = _decoder(value_type) or _same
        return lambda value: {
            key_decode(name): value_decode(item) for name, item in (value or {}).items()
        }
    _check_leaf(hint)
    return _SCALARS.get(hint)


def _check_leaf(hint: Any) -> None:
    if hint in _SCALARS or hint is Any or typing.get_origin(hint) is Literal:
        return
    raise TypeError(f"the wire codec has no plan for {hint!r}")


def _same(value: Any) -> Any:
    return value
