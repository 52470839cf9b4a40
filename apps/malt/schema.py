"""The MALT protobuf schema, built at runtime, and the text-format parser of the model file.

Upstream publishes the example model only in protobuf text format, without ``.proto`` files.
``apps/malt/proto/malt.proto`` is our own minimal schema; this module builds the same
``FileDescriptorProto`` with ``descriptor_pb2`` and turns it into message classes with
``message_factory``. That needs no ``protoc`` and no generated ``_pb2`` module, so it does not
break when the installed protobuf runtime changes major version (generated code is pinned to
the runtime major version it was generated for). The file is then parsed with the real
``google.protobuf.text_format`` parser: an unknown field, enum value or malformed token raises
:class:`google.protobuf.text_format.ParseError` instead of being guessed at.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format
from google.protobuf.message import Message

PACKAGE = "netarena.malt"

#: enum name -> value names in number order (number = position). Mirrors malt.proto.
ENUMS: dict[str, tuple[str, ...]] = {
    "EntityKind": (
        "EK_UNSPECIFIED",
        "EK_JUPITER",
        "EK_SUPERBLOCK",
        "EK_SPINEBLOCK",
        "EK_AGG_BLOCK",
        "EK_PACKET_SWITCH",
        "EK_CHASSIS",
        "EK_CONTROL_POINT",
        "EK_PORT",
        "EK_RACK",
        "EK_CONTROL_DOMAIN",
    ),
    "RelationshipKind": ("RK_UNSPECIFIED", "RK_CONTAINS", "RK_CONTROLS"),
    "JupiterType": ("JDT_UNSPECIFIED", "JDT_COLO"),
}

#: message name -> fields (name, number, label, scalar type or message/enum name). Mirrors
#: malt.proto; ``label`` is "optional" or "repeated".
MESSAGES: dict[str, tuple[tuple[str, int, str, str], ...]] = {
    "EntityId": (("kind", 1, "optional", "EntityKind"), ("name", 2, "optional", "string")),
    "JupiterAttr": (("jupiter_type", 1, "optional", "JupiterType"),),
    "SuperblockAttr": (("index_within_jupiter", 1, "optional", "int64"),),
    "SwitchLocation": (("stage", 1, "optional", "int64"),),
    "PacketSwitchAttr": (("switch_loc", 1, "optional", "SwitchLocation"),),
    "PortAttr": (("physical_capacity_bps", 1, "optional", "int64"),),
    "Entity": (
        ("id", 1, "optional", "EntityId"),
        ("jupiter_attr", 2, "optional", "JupiterAttr"),
        ("superblock_attr", 3, "optional", "SuperblockAttr"),
        ("packet_switch_attr", 4, "optional", "PacketSwitchAttr"),
        ("port_attr", 5, "optional", "PortAttr"),
    ),
    "Relationship": (
        ("kind", 1, "optional", "RelationshipKind"),
        ("a", 2, "optional", "EntityId"),
        ("z", 3, "optional", "EntityId"),
    ),
    "Model": (
        ("entity", 1, "repeated", "Entity"),
        ("relationship", 2, "repeated", "Relationship"),
    ),
}

_FDP = descriptor_pb2.FieldDescriptorProto
_SCALARS = {"string": _FDP.TYPE_STRING, "int64": _FDP.TYPE_INT64}
_LABELS = {"optional": _FDP.LABEL_OPTIONAL, "repeated": _FDP.LABEL_REPEATED}


def file_descriptor_proto() -> descriptor_pb2.FileDescriptorProto:
    """Return the ``FileDescriptorProto`` of ``malt.proto`` (proto2, package netarena.malt)."""
    fdp = descriptor_pb2.FileDescriptorProto(
        name="netarena/malt/malt.proto", package=PACKAGE, syntax="proto2"
    )
    for enum_name, values in ENUMS.items():
        enum = fdp.enum_type.add(name=enum_name)
        for number, value_name in enumerate(values):
            enum.value.add(name=value_name, number=number)
    for message_name, fields in MESSAGES.items():
        message = fdp.message_type.add(name=message_name)
        for field_name, number, label, type_name in fields:
            field = message.field.add(name=field_name, number=number, label=_LABELS[label])
            if type_name in _SCALARS:
                field.type = _SCALARS[type_name]
            elif type_name in ENUMS:
                field.type = _FDP.TYPE_ENUM
                field.type_name = f".{PACKAGE}.{type_name}"
            else:
                field.type = _FDP.TYPE_MESSAGE
                field.type_name = f".{PACKAGE}.{type_name}"
    return fdp


@cache
def model_class() -> type[Message]:
    """Return the message class of ``netarena.malt.Model`` (built once per process)."""
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_descriptor_proto())
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.Model"))


def parse_model(text: str) -> Message:
    """Parse MALT text format into a ``netarena.malt.Model`` message.

    Raises:
        google.protobuf.text_format.ParseError: the text does not match the schema.
    """
    model = model_class()()
    text_format.Parse(text, model)
    return model


def message_to_attrs(message: Message) -> dict[str, Any]:
    """Flatten a set ``*_attr`` sub-message into plain Python values.

    Enums become their value name (``"JDT_COLO"``), int64 stays ``int``, nested messages become
    dicts (``{"stage": 2}``). Only fields present in the file are included (proto2 presence).
    """
    out: dict[str, Any] = {}
    for field, value in message.ListFields():
        if field.type == _FDP.TYPE_MESSAGE:
            out[field.name] = message_to_attrs(value)
        elif field.type == _FDP.TYPE_ENUM:
            out[field.name] = field.enum_type.values_by_number[value].name
        else:
            out[field.name] = value
    return out
