"""The bootstrap's inputs as the engine hands them to the provider: numbers as doubles.

`carried` passes a value through the SDK's own serialisation and back, which is what reaches a
dynamic provider (pulumi/runtime/rpc.py writes every number as a Struct's double; the provider
host reads requests with `rpc.deserialize_properties`).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pulumi.runtime import rpc

from lab.bootstrap import resource
from lab.bootstrap.engine_values import engine_safe, from_engine
from lab.bootstrap.playbook import PlaybookResult
from lab.bootstrap.resource import HostBootstrapProvider, bootstrap_inputs, content_hash
from lab.config import load_stack, parse_config
from lab.paths import ANSIBLE_DIR, STACKS_DIR

STACKS = sorted(
    p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in STACKS_DIR.glob("Pulumi.*.yaml")
)


def carried(value: dict[str, Any]) -> dict[str, Any]:
    return rpc.deserialize_properties(asyncio.run(rpc.serialize_properties(value, {})))


def _typed(value: Any) -> Any:
    """`value` with each leaf paired with its type, so that 1 and 1.0 compare unequal."""
    if isinstance(value, dict):
        return {key: _typed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_typed(item) for item in value]
    return (type(value).__name__, value)


@pytest.mark.parametrize("stack", STACKS)
def test_the_engine_turns_every_integer_into_a_float(stack: str) -> None:
    """What the provider must undo: without it Ansible is handed uids and ports like 10001.0."""
    inputs = bootstrap_inputs(load_stack(stack), stack)
    assert carried(inputs) == inputs
    assert _typed(carried(inputs)) != _typed(inputs)
    assert _typed(from_engine(carried(inputs))) == _typed(inputs)


@pytest.mark.parametrize("stack", STACKS)
def test_ansible_gets_every_number_as_the_program_made_it(
    stack: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    inputs = bootstrap_inputs(load_stack(stack), stack)
    handed: list[tuple[Any, Any]] = []

    def playbook(workdir: Path, name: str, inventory: Any, extravars: Any, **_: Any) -> PlaybookResult:
        handed.append((inventory, extravars))
        return PlaybookResult(name, changed={"node": 1})

    monkeypatch.setattr(resource, "run_playbook", playbook)
    monkeypatch.setattr(resource, "with_known_hosts", lambda inventory, _known_hosts: inventory)
    provider = HostBootstrapProvider()
    outs = provider.create(carried(inputs)).outs
    assert outs is not None
    provider.update("hosts", carried(outs), carried(inputs))
    provider.delete("hosts", carried(outs))
    assert len(handed) == 3
    for inventory, extravars in handed:
        assert _typed(inventory) == _typed(inputs["inventory"])
        assert _typed(extravars) == _typed(inputs["extravars"])


def test_a_carried_state_is_unchanged_to_the_diff_and_the_hash() -> None:
    inputs = bootstrap_inputs(load_stack("testbed"), "testbed")
    stored = {**carried(inputs), "token": "t", "kubeconfig": "", "nodes": {}, "changed": {}}
    assert HostBootstrapProvider().diff("hosts", stored, carried(inputs)).changes is False
    engine_form = carried(inputs)
    assert (
        content_hash(ANSIBLE_DIR, engine_form["inventory"], engine_form["extravars"])
        == inputs["content_hash"]
    )


def test_a_float_in_the_inputs_is_refused_where_they_are_made() -> None:
    inventory = {"all": {"vars": {"lab_ratio": 0.5, "lab_ports": [1, 2]}}}
    with pytest.raises(TypeError, match=r"inputs\.all\.vars\.lab_ratio is the float 0\.5"):
        engine_safe(inventory)
    assert engine_safe({"all": {"vars": {"lab_port": 1, "lab_on": True}}}) == {
        "all": {"vars": {"lab_port": 1, "lab_on": True}}
    }


def test_a_none_in_the_inputs_is_refused_and_a_stack_without_optional_values_has_none() -> None:
    with pytest.raises(TypeError, match=r"inputs\.all\.hosts\.a\.node_interface is None"):
        engine_safe({"all": {"hosts": {"a": {"node_interface": None}}}})
    bare = {
        "nodes": [
            {"name": "node-a", "address": "10.9.0.1", "user": "lab", "role": "server"},
            {"name": "node-b", "address": "10.9.0.2", "user": "lab", "role": "agent"},
        ]
    }
    inputs = bootstrap_inputs(parse_config(bare), "demo")
    assert _typed(from_engine(carried(inputs))) == _typed(inputs)
