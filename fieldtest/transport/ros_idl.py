"""CycloneDDS IDL types for ROS 2 messages, built from rosbags' message definitions.

rmw_cyclonedds names a ROS type ``pkg/msg/Name`` on the wire ``pkg::msg::dds_::Name_`` and lays
out its fields exactly as the .msg declares them (plain XCDR1, no keys). ``idl_class`` builds that
IdlStruct for any type in ``fieldtest.rosmsg.typestore()`` by walking its field definitions, so
the kit's own messages (fieldtest_msgs) get theirs the same way as geometry_msgs.
``to_idl``/``from_idl`` convert between rosbags message objects and those IdlStruct objects.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
from cyclonedds.idl import IdlStruct, make_idl_struct
from cyclonedds.idl import types as idl_types
from rosbags.typesys.base import Nodetype

from fieldtest import rosmsg
from fieldtest.errors import FieldtestError

_BASE_TYPES: dict[str, Any] = {
    "bool": bool,
    "byte": idl_types.uint8,
    "char": idl_types.uint8,
    "int8": idl_types.int8,
    "uint8": idl_types.uint8,
    "int16": idl_types.int16,
    "uint16": idl_types.uint16,
    "int32": idl_types.int32,
    "uint32": idl_types.uint32,
    "int64": idl_types.int64,
    "uint64": idl_types.uint64,
    "float32": idl_types.float32,
    "float64": idl_types.float64,
}

# numpy dtype rosbags uses for arrays/sequences of each numeric base type.
_NUMPY_DTYPES = {
    "bool": np.bool_,
    "byte": np.uint8,
    "char": np.uint8,
    "int8": np.int8,
    "uint8": np.uint8,
    "int16": np.int16,
    "uint16": np.uint16,
    "int32": np.int32,
    "uint32": np.uint32,
    "int64": np.int64,
    "uint64": np.uint64,
    "float32": np.float32,
    "float64": np.float64,
}


class IdlTypeError(FieldtestError, TypeError):
    """A ROS type that cannot be expressed as a CycloneDDS Python IDL type (e.g. wstring)."""


def dds_type_name(typename: str) -> str:
    """'geometry_msgs/msg/Twist' -> 'geometry_msgs::msg::dds_::Twist_' (rmw_cyclonedds naming)."""
    parts = typename.split("/")
    if len(parts) != 3:
        raise IdlTypeError(f"ROS type name {typename!r} is not of the form pkg/msg/Name")
    pkg, kind, name = parts
    return f"{pkg}::{kind}::dds_::{name}_"


def _fields(typename: str) -> list[tuple[str, tuple]]:
    try:
        return rosmsg.typestore().fielddefs[typename][1]
    except KeyError:
        raise IdlTypeError(f"unknown ROS message type {typename!r}") from None


def _base_idl_type(name: str, bound: int) -> Any:
    if name == "string":
        return idl_types.bounded_str[bound] if bound else str  # type: ignore[misc]  # cyclonedds' IDL types subscript in __class_getitem__, not as Generic
    if name in _BASE_TYPES:
        return _BASE_TYPES[name]
    raise IdlTypeError(f"ROS base type {name!r} has no CycloneDDS Python equivalent")


def _idl_field_type(desc: tuple) -> Any:
    kind, rest = desc
    if kind == Nodetype.BASE:
        return _base_idl_type(*rest)
    if kind == Nodetype.NAME:
        return idl_class(rest)
    elem, size = rest
    if kind == Nodetype.ARRAY:
        return idl_types.array[_idl_field_type(elem), size]  # type: ignore[misc]  # cyclonedds' IDL types subscript in __class_getitem__, not as Generic
    if kind == Nodetype.SEQUENCE:
        sub = _idl_field_type(elem)
        return idl_types.sequence[sub, size] if size else idl_types.sequence[sub]  # type: ignore[misc]  # cyclonedds' IDL types subscript in __class_getitem__, not as Generic
    raise IdlTypeError(f"unsupported field kind {kind!r}")


@functools.cache
def idl_class(typename: str) -> type[IdlStruct]:
    """The IdlStruct class (final, keyless) for a ROS message type, named as rmw_cyclonedds names it."""
    fields = {name: _idl_field_type(desc) for name, desc in _fields(typename)}
    class_name = typename.replace("/", "_")
    return make_idl_struct(class_name, dds_type_name(typename), fields)


# ---- conversion, compiled once per type into closures (runs on every message) ----

Convert = Callable[[Any], Any]


def _identity(value: Any) -> Any:
    return value


def _is_numeric(desc: tuple) -> bool:
    return desc[0] == Nodetype.BASE and desc[1][0] in _NUMPY_DTYPES


def _to_idl_converter(desc: tuple) -> Convert:
    kind, rest = desc
    if kind == Nodetype.BASE:
        return _identity
    if kind == Nodetype.NAME:
        return _to_idl_struct(rest)
    elem, _size = rest
    if _is_numeric(elem):
        if kind == Nodetype.ARRAY and elem[1][0] in ("uint8", "byte", "char"):
            return lambda v: bytes(np.asarray(v, dtype=np.uint8))  # IDL octet arrays are bytes
        return lambda v: np.asarray(v).tolist()
    sub = _to_idl_converter(elem)
    return lambda v: [sub(x) for x in v]


def _from_idl_converter(desc: tuple) -> Convert:
    kind, rest = desc
    if kind == Nodetype.BASE:
        return _identity
    if kind == Nodetype.NAME:
        return _from_idl_struct(rest)
    elem, _size = rest
    if _is_numeric(elem):
        dtype = _NUMPY_DTYPES[elem[1][0]]
        if kind == Nodetype.ARRAY and elem[1][0] in ("uint8", "byte", "char"):
            return lambda v: np.frombuffer(bytes(v), dtype=np.uint8).copy()
        return lambda v: np.asarray(v, dtype=dtype)
    sub = _from_idl_converter(elem)
    return lambda v: [sub(x) for x in v]


@functools.cache
def _to_idl_struct(typename: str) -> Convert:
    cls = idl_class(typename)
    plan = [(name, _to_idl_converter(desc)) for name, desc in _fields(typename)]
    return lambda msg: cls(**{name: conv(getattr(msg, name)) for name, conv in plan})


@functools.cache
def _from_idl_struct(typename: str) -> Convert:
    cls = rosmsg.msg_class(typename)
    plan = [(name, _from_idl_converter(desc)) for name, desc in _fields(typename)]
    return lambda obj: cls(**{name: conv(getattr(obj, name)) for name, conv in plan})


def to_idl(msg: Any, typename: str) -> IdlStruct:
    """The IdlStruct object carrying the same values as the rosbags message ``msg``."""
    return _to_idl_struct(typename)(msg)


def from_idl(obj: IdlStruct, typename: str) -> Any:
    """The rosbags message object carrying the same values as the IdlStruct ``obj``."""
    return _from_idl_struct(typename)(obj)
