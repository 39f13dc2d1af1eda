"""The program reads its configuration as `pulumi up` hands it over, and judges it as labctl does.

The harness passes the configuration the way the language host does: every `k8scifar:*` value a
string (objects and lists as JSON) in PULUMI_CONFIG, the keys of decrypted `secure:` values in
PULUMI_CONFIG_SECRET_KEYS, with whatever other namespaces the stack file holds.
"""

from __future__ import annotations

import pytest

from lab.config import ConfigError, load_stack, parse_config, read_stack_values, stack_file
from tests.support.program import run_program

STACK = "example-cpu"


def _values() -> dict:
    return read_stack_values(stack_file(STACK))


def test_a_misspelt_top_level_key_is_refused_by_the_program() -> None:
    values = _values()
    values["trainr"] = values.pop("trainer", {"epochs": 2})
    with pytest.raises(ConfigError, match=r"k8scifar:trainr: unknown key"):
        run_program(STACK, values)
    # labctl refuses the same file for the same reason.
    with pytest.raises(ConfigError, match=r"k8scifar:trainr: unknown key"):
        parse_config(values)


def test_other_namespaces_are_left_alone() -> None:
    other = {"kubernetes:context": "lab", "pulumi:tags": '{"team": "ml"}', "aws:region": "eu-west-1"}
    run = run_program(STACK, other_config=other)
    assert run.outputs["registry"] == load_stack(STACK).registry_endpoint


def test_values_arrive_as_text_and_mean_what_the_stack_file_says() -> None:
    """Scalars come as their text and objects as JSON; the program's lab equals labctl's."""
    values = {**_values(), "kubernetesVersion": "1.33.5", "namespace": "lab-one"}
    run = run_program(STACK, values)
    namespace = next(r for r in run.kubernetes_objects() if r.kind == "Namespace" and r.name == "namespace")
    assert namespace.inputs["metadata"]["name"] == "lab-one"
    assert set(run.outputs["nodes"]) == {n.name for n in load_stack(STACK).nodes}


def test_a_secure_value_is_refused_with_the_reason() -> None:
    with pytest.raises(ConfigError, match=r"k8scifar:namespace: is stored encrypted \(secure:\)"):
        run_program(STACK, {**_values(), "namespace": "lab-one"}, secret_keys=["k8scifar:namespace"])
