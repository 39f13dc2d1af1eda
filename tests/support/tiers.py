"""The suite's speed tiers, decided from what a test uses rather than marked test by test.

A test is slow when it lives under tests/integration (it drives the local test machines, which
its tier shares, so that tier also runs alone) or when it reaches something costly: a helper or
fixture declared with `costly(why)` that costs seconds each use on two cores (a real
ansible-playbook run, a trainer process, the sshd, a package install, a real Prometheus), or one
of the lab's own such functions, listed in LAB_COSTLY. It reaches one when the test function,
one of its fixtures, or a function of the suite's own that any of these calls (followed through
calls) names a costly one. tests/conftest.py applies the rule at collection; `pytest -m "not
slow"` is the fast tier (tests/README.md).
"""

from __future__ import annotations

import dis
import types
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

F = TypeVar("F", bound=Callable[..., Any])

INTEGRATION_DIR = ("tests", "integration")
_COSTLY = "__k8scifar_costly__"
_PACKAGE = "tests."
# The lab's own functions that are costly wherever a test calls them (they cannot carry `costly`).
LAB_COSTLY = {
    "lab.bootstrap.playbook.run_playbook": "a real playbook run by ansible-runner",
    "lab.controlplane.running": "a real control plane: etcd, the API server, controllers, kwok",
    "lab.controlplane.up": "a real control plane: etcd, the API server, controllers, kwok",
}


def costly(why: str) -> Callable[[F], F]:
    """Declare a helper or fixture costly: every test that reaches it is slow. `why` says what it runs."""

    def declare(function: F) -> F:
        setattr(function, _COSTLY, why)
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


def in_integration(item: pytest.Item) -> bool:
    """Whether `item` is in tests/integration."""
    return item.path.relative_to(item.config.rootpath).parts[:2] == INTEGRATION_DIR


def why_slow(item: pytest.Item) -> str | None:
    """Why `item` belongs to the slow tier, or None for the fast tier."""
    if in_integration(item):
        return "it drives the local test machines"
    seen: dict[int, str | None] = {}
    functions = [getattr(item, "function", None)]
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        definitions = info.name2fixturedefs.get(name, ()) if info is not None else ()
        functions += [definition.func for definition in definitions]
    for function in functions:
        found = cost_of(function, seen) if function is not None else None
        if found is not None:
            return found
    return None


def apply_tiers(items: list[pytest.Item]) -> None:
    """Mark each slow item `slow`, and each under tests/integration `integration` too."""
    for item in items:
        if in_integration(item):
            item.add_marker(pytest.mark.integration)
        if why_slow(item) is not None:
            item.add_marker(pytest.mark.slow)
