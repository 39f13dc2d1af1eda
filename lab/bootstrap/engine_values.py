"""The bootstrap's values as they cross the Pulumi engine, and back to the types they were made with.

The engine hands a dynamic provider its inputs, and later its stored outputs, as a protobuf
Struct. A Struct's only number is a double (google/protobuf/struct.proto: `double number_value`),
and the SDK writes every Python number as one (pulumi/runtime/rpc.py, `serialize_property`:
`struct_pb2.Value(number_value=float(value))`; `deserialize_property` gives it back as that
float). So a trainer uid of 10001 reaches the provider as 10001.0, and Ansible's chown then looks
up a user named "10001.0".

The SDK also leaves out a property whose value is None (`serialize_properties`: "properties that
serialize to None" are treated "as if they don't exist"), so a role would find the variable
undefined.

The inputs are made by this package with integers only (no value of the inventory or the
variables is a fraction: ports, uids, counts, GPU numbers, versions' minors) and no None:
`engine_safe` holds that where they are made, so every number that comes back through the engine
was an integer, and `from_engine` restores it, in one place, for every entry point of the provider.
"""

from __future__ import annotations

from typing import Any


def engine_safe(value: Any, path: str = "inputs") -> Any:
    """`value` unchanged, after checking it holds no float (a float would come back as an integer).

    Raises TypeError naming the first float's place: a programming error, found before any host
    is touched.
    """
    if isinstance(value, float):
        raise TypeError(
            f"{path} is the float {value!r}: the bootstrap's inputs hold integers only, since the"
            " engine turns every number into a double and lab.bootstrap.engine_values turns it back"
            " into an integer; pass it as a string"
        )
    if value is None:
        raise TypeError(
            f"{path} is None, which the engine drops (a property that serialises to None does not"
            " exist for it, pulumi/runtime/rpc.py), so Ansible would find it undefined; give it an"
            " empty value of its type"
        )
    if isinstance(value, dict):
        for key, item in value.items():
            engine_safe(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            engine_safe(item, f"{path}[{index}]")
    return value


def from_engine(value: Any) -> Any:
    """`value` as the program made it: every whole float an integer again, however deep."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: from_engine(item) for key, item in value.items()}
    if isinstance(value, list):
        return [from_engine(item) for item in value]
    return value


__all__ = ["engine_safe", "from_engine"]
