"""The suite's speed tiers, decided from what a test uses rather than marked test by test.

A test is slow when it lives under tests/integration (it drives the local test machines, which
its tier shares, so that tier also runs alone) or when it reaches something costly: a helper or
fixture declared with `costly(why)` that costs seconds each use on two cores (a real
ansible-playbook run, a trainer process, the sshd, a package install, a real Prometheus), or one
of the lab's own such functions, listed in LAB_COSTLY. It reaches one when the test function,
one of its fixtures, or a function of the suite's own that any of these calls (followed through
calls) names a costly one. tests/conftest.py applies the rule at collection; `pytest -m "not
slow"` is the fast tier (tests/README.md).

The slow tier runs on two pytest-xdist workers (`--dist loadgroup`), so a test that uses something
machine-wide takes turns with every other test using it: it is put in that thing's xdist group.
The integration tier shares the test machines (group TEST_MACHINES); a costly helper or fixture
names what it shares with `costly(why, shares=...)`, reached by the same rule as its cost. Tests
that share anything, directly or through another test, share one group.
"""

from __future__ import annotations

import dis
import types
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from _pytest.nodeid import NodeId

F = TypeVar("F", bound=Callable[..., Any])

INTEGRATION_DIR = ("tests", "integration")
# The xdist group of the integration tier: the test machines' fixed addresses, namespaces and lock.
TEST_MACHINES = "testmachines"
_COSTLY = "__k8scifar_costly__"
_SHARES = "__k8scifar_shares__"
_PACKAGE = "tests."
# The lab's own functions that are costly wherever a test calls them (they cannot carry `costly`).
LAB_COSTLY = {
    "lab.bootstrap.playbook.run_playbook": "a real playbook run by ansible-runner",
    "lab.controlplane.running": "a real control plane: etcd, the API server, controllers, kwok",
    "lab.controlplane.up": "a real control plane: etcd, the API server, controllers, kwok",
}


def costly(why: str, shares: str | None = None) -> Callable[[F], F]:
    """Declare a helper or fixture costly: every test that reaches it is slow. `why` says what it runs;
    `shares` names the machine-wide thing it uses, which the tests reaching it take turns on."""

    def declare(function: F) -> F:
        setattr(function, _COSTLY, why)
        if shares is not None:
            setattr(function, _SHARES, shares)
        return function

    return declare


def _own(value: Any) -> types.FunctionType | None:
    """The plain function behind `value` when the suite defines it (a cache's or wrapper's too)."""
    while not isinstance(value, types.FunctionType) and hasattr(value, "__wrapped__"):
        value = value.__wrapped__
    if isinstance(value, types.FunctionType) and value.__module__.startswith(_PACKAGE):
        return value
    return None


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    """A code object and those nested in it (inner functions, lambdas, comprehensions)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _globals_named(function: types.FunctionType) -> Iterator[Any]:
    """The module-level values `function`'s code reads by name (not attributes or locals)."""
    for code in _codes(function.__code__):
        for instruction in dis.get_instructions(code):
            if instruction.opname in {"LOAD_GLOBAL", "LOAD_NAME"}:
                name = instruction.argval
                if name in function.__globals__:
                    yield function.__globals__[name]


def cost_of(function: Any, _seen: dict[int, str | None] | None = None) -> str | None:
    """Why `function` is costly (its own declaration, or one it reaches), or None."""
    seen = {} if _seen is None else _seen
    why = getattr(function, _COSTLY, None)
    if why is not None:
        return str(why)
    name = f"{getattr(function, '__module__', '')}.{getattr(function, '__qualname__', '')}"
    if name in LAB_COSTLY:
        return LAB_COSTLY[name]
    own = _own(function)
    if own is None:
        return None
    if id(own) in seen:
        return seen[id(own)]
    seen[id(own)] = getattr(own, _COSTLY, None)
    for value in _globals_named(own):
        found = cost_of(value, seen)
        if found is not None:
            seen[id(own)] = found
            break
    return seen[id(own)]


def shared_by(function: Any, _seen: set[int] | None = None) -> set[str]:
    """What machine-wide things `function` uses: its own declaration, and every one it reaches."""
    seen = set() if _seen is None else _seen
    found = {str(getattr(function, _SHARES))} if hasattr(function, _SHARES) else set()
    own = _own(function)
    if own is None or id(own) in seen:
        return found
    seen.add(id(own))
    for value in _globals_named(own):
        found |= shared_by(value, seen)
    return found


def in_integration(item: pytest.Item) -> bool:
    """Whether `item` is in tests/integration."""
    return item.path.relative_to(item.config.rootpath).parts[:2] == INTEGRATION_DIR


def _functions(item: pytest.Item) -> list[Any]:
    """The test function of `item` and those of its fixtures."""
    functions = [getattr(item, "function", None)]
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        definitions = info.name2fixturedefs.get(name, ()) if info is not None else ()
        functions += [definition.func for definition in definitions]
    return [function for function in functions if function is not None]


def why_slow(item: pytest.Item) -> str | None:
    """Why `item` belongs to the slow tier, or None for the fast tier."""
    if in_integration(item):
        return "it drives the local test machines"
    seen: dict[int, str | None] = {}
    for function in _functions(item):
        found = cost_of(function, seen)
        if found is not None:
            return found
    return None


def shared_by_item(item: pytest.Item) -> set[str]:
    """The machine-wide things `item` uses: the test machines for the integration tier, and what
    the test or its fixtures reach."""
    found = {TEST_MACHINES} if in_integration(item) else set()
    seen: set[int] = set()
    for function in _functions(item):
        found |= shared_by(function, seen)
    return found


def xdist_groups(shared: list[set[str]]) -> list[str | None]:
    """For each test's set of shared things, its xdist group (None for one that shares nothing):
    the things that one test uses together are one group, named by them all."""
    parent: dict[str, str] = {}

    def top(name: str) -> str:
        while parent.setdefault(name, name) != name:
            name = parent[name]
        return name

    for names in shared:
        ordered = sorted(names)
        for name in ordered:
            parent[top(name)] = top(ordered[0])
    members: dict[str, list[str]] = {}
    for name in parent:
        members.setdefault(top(name), []).append(name)
    return ["+".join(sorted(members[top(min(names))])) if names else None for names in shared]


def apply_tiers(items: list[pytest.Item], loadgroup: bool = False) -> None:
    """Mark each slow item `slow`, each under tests/integration `integration` too, and each that
    uses something machine-wide with that thing's xdist group.

    `loadgroup`: the run is pytest-xdist's `--dist loadgroup`, whose scheduler reads a test's
    group from an `@GROUP` ending of its node id. pytest-xdist 3.8 writes that ending to
    `Node._nodeid`, which pytest 9.2 no longer reads (a node's id is `Node._id`), so every test
    would be scheduled alone: the ending is written here.
    """
    for item in items:
        if in_integration(item):
            item.add_marker(pytest.mark.integration)
        if why_slow(item) is not None:
            item.add_marker(pytest.mark.slow)
    for item, group in zip(items, xdist_groups([shared_by_item(item) for item in items]), strict=True):
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
            if loadgroup:
                item._id = NodeId.parse(f"{item.nodeid}@{group}")
