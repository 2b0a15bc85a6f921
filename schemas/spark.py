"""Spark StructType derived from the pydantic event models (imports pyspark: edges only)."""

from __future__ import annotations

import types
import typing

from pydantic import BaseModel
from pyspark.sql import types as T

from schemas.route_event import (
    ChannelClosedEvent,
    HeartbeatEvent,
    RegisterEvent,
    TickEvent,
    UnregisterEvent,
)

_SCALARS = {int: T.LongType(), str: T.StringType(), bool: T.BooleanType()}


def _spark_type(annotation: object) -> T.DataType:
    origin = typing.get_origin(annotation)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if origin is typing.Annotated:
        return _spark_type(args[0])
    if origin in (typing.Union, types.UnionType):
        return _spark_type(args[0])
    if origin is typing.Literal:
        return T.StringType()
    if origin is list:
        return T.ArrayType(_spark_type(args[0]))
    if origin is dict:
        return T.MapType(_spark_type(args[0]), _spark_type(args[1]))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return model_struct(annotation)
    return _SCALARS[annotation]  # type: ignore[index]  # a scalar type by now (KeyError if not)


def model_struct(*models: type[BaseModel]) -> T.StructType:
    """One struct with the union of the models' fields, in first-seen order."""
    fields: dict[str, T.StructField] = {}
    for model in models:
        for name, info in model.model_fields.items():
            if name not in fields:
                fields[name] = T.StructField(name, _spark_type(info.annotation), True)
    return T.StructType(list(fields.values()))


def event_struct() -> T.StructType:
    """The full event schema, as Spark reads a JSON line of any event type."""
    return model_struct(
        RegisterEvent, HeartbeatEvent, UnregisterEvent, ChannelClosedEvent, TickEvent
    )
