"""What a newcomer writes wrong in a stack file gets one line naming the key and the fix, never
a traceback or a message about something else; what `pulumi up` accepts, labctl accepts too."""

from __future__ import annotations

import os
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

from lab.cli.common.console import one_line
from lab.config import ConfigError, LabConfig, load_stack, parse_config, read_stack_values
from lab.config.fields import nested_model
from lab.config.messages import PATTERN_RULES
from tests.support.labctl import Labctl, assert_one_line_error

# The reference lab without GPUs, as a newcomer copies it from stacks/.
STACK = """\
config:
  k8scifar:nodes:
    - name: cpu-a
      address: 192.168.50.11
      user: ubuntu
      role: server{server}
    - name: cpu-b
      address: 192.168.50.12
      user: ubuntu
      role: agent
  k8scifar:ssh:
    keyPath: ~/.ssh/id_ed25519
    hostKeyPolicy: {policy}
  k8scifar:trainer:
    replicas: 2
    epochs: {epochs}
{extra}"""


def _stack(server: str = "", policy: str = "accept-new", epochs: str = "2", extra: str = "") -> str:
    return STACK.format(server=server, policy=policy, epochs=epochs, extra=extra)


def _message(tmp_path: Path, content: str) -> str:
    (tmp_path / "Pulumi.new.yaml").write_text(content)
    with pytest.raises(ConfigError) as caught:
        load_stack("new", tmp_path)
    return one_line(caught.value)


WRONG = [
    # (what, stack file, the line must hold each of these, and none of the misleading words)
    (
        "a quoted GPU count on one node",
        _stack(server='\n      gpus: "1"'),
        ["k8scifar:trainer.replicas", "k8scifar:nodes[0].gpus", "cpu-a has 1"],
        [],
    ),
    (
        "an interface name with a blank",
        _stack(server="\n      interface: eth 0"),
        ["k8scifar:nodes[0].interface", "'eth 0' is not a network interface name", "ip -brief link"],
        ["DNS label"],
    ),
    (
        "a misspelt skip step",
        _stack(extra="  k8scifar:skip:\n    kubernetesInstal: no binaries here\n"),
        ["k8scifar:skip.kubernetesInstal: unknown key", "'kubernetesInstall' or 'nfsServerStart'"],
        ["kubernetesinstall", "[key]"],
    ),
    (
        "an unquoted off",
        _stack(policy="off"),
        [
            "k8scifar:ssh.hostKeyPolicy (line 13): unquoted off is false to labctl",
            'write it in quotes ("off")',
        ],
        ["False"],
    ),
    (
        "a secure: value",
        _stack(extra="  k8scifar:namespace:\n    secure: AAABAMPe4cZMPGr2S0Ji\n"),
        ["k8scifar:namespace: is stored encrypted (secure:)", "set it in plain text"],
        ["valid string"],
    ),
    (
        "a 5000-digit number",
        _stack(epochs="9" * 5000),
        ["Pulumi.new.yaml:16:13: a number of 5000 digits"],
        ["99999999999"],
    ),
    (
        "lists nested thousands deep",
        _stack(extra="  k8scifar:namespace: " + "[" * 5000 + "]" * 5000 + "\n"),
        ["nested too deeply to read"],
        [],
    ),
]


@pytest.mark.parametrize(("what", "content", "said", "unsaid"), WRONG, ids=[w[0] for w in WRONG])
def test_a_newcomers_mistake_is_one_line_naming_the_key_and_the_fix(
    what: str, content: str, said: list[str], unsaid: list[str], tmp_path: Path
) -> None:
    line = _message(tmp_path, content)
    assert "\n" not in line and len(line) < 400, f"{what}: {line}"
    for words in said:
        assert words in line, f"{what}: {words!r} not in {line}"
    for words in unsaid:
        assert words not in line, f"{what}: {words!r} in {line}"


def test_a_5000_digit_number_is_one_line_from_labctl(tmp_path: Path, labctl_in_process: Labctl) -> None:
    (tmp_path / "Pulumi.new.yaml").write_text(_stack(epochs="9" * 5000))
    result = labctl_in_process("validate", "--stack", "new", "--stacks-dir", tmp_path)
    assert_one_line_error(result, "a number of 5000 digits")


def test_a_5000_digit_text_is_quoted_short_as_pulumi_hands_it_over() -> None:
    """`pulumi up` hands scalars over as text: the message quotes the value cut short."""
    with pytest.raises(ConfigError) as caught:
        node = {"name": "a", "address": "192.168.50.11", "user": "u", "role": "server"}
        parse_config({"nodes": [node], "trainer": {"seed": "9" * 5000}})
    line = one_line(caught.value)
    assert "k8scifar:trainer.seed: must be an integer" in line and "(5000 characters)" in line
    assert len(line) < 300, line


def test_keys_of_other_namespaces_are_left_to_them_as_pulumi_up_does(tmp_path: Path) -> None:
    """`pulumi up` reads `kubernetes:*` (the provider's) and `pulumi:*` keys beside the lab's
    (pulumi/pulumi sdk/go/common/resource/config/key.go: any `NAMESPACE:NAME`), and the older
    `NAMESPACE:config:NAME` spelling; a misspelt lab namespace or a bare key is still named."""
    extra = (
        "  kubernetes:context: lab\n  pulumi:tags:\n    team: ml\n  aws:region: eu-west-1\n"
        "  k8scifar:config:namespace: lab-one\n"
    )
    (tmp_path / "Pulumi.new.yaml").write_text(_stack(extra=extra))
    assert load_stack("new", tmp_path).namespace == "lab-one"
    line = _message(tmp_path, _stack(extra="  k8scfar:namespace: lab-one\n  namespace: lab-two\n"))
    assert "k8scfar:namespace: no such namespace 'k8scfar'; the lab's keys are k8scifar:namespace" in line
    assert "namespace: keys must be written k8scifar:NAME" in line


def _patterns(model: type[BaseModel]) -> Iterator[tuple[str, str]]:
    """(key, pattern) of each string key of `model` and the models it holds that has a pattern."""
    for name, field in model.model_fields.items():
        for annotation in (field.annotation, *typing.get_args(field.annotation)):
            for meta in (*field.metadata, *getattr(annotation, "__metadata__", ())):
                pattern = getattr(meta, "pattern", None)
                if isinstance(pattern, str):
                    yield name, pattern
        nested = nested_model(field.annotation)
        if nested is not None:
            yield from _patterns(nested)


def test_every_pattern_a_key_must_match_has_its_own_message() -> None:
    found = dict(_patterns(LabConfig))
    assert {"name", "user", "interface", "namespace"} <= set(found)
    assert [key for key, pattern in found.items() if pattern not in PATTERN_RULES] == []


@pytest.mark.parametrize("length", [64, 254])
def test_a_long_name_is_counted_as_written(length: int) -> None:
    node = {"name": "a" * length, "address": "192.168.50.11", "user": "u", "role": "server"}
    with pytest.raises(ConfigError) as caught:
        parse_config({"nodes": [node]})
    line = one_line(caught.value)
    assert f"({length} characters)" in line, line


@pytest.mark.parametrize("kind", ["folder", "fifo", "dev-zero"])
def test_a_stack_file_that_is_no_file_is_named_so(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.t.yaml"
    {"folder": path.mkdir, "fifo": lambda: os.mkfifo(path), "dev-zero": lambda: path.symlink_to("/dev/zero")}[
        kind
    ]()
    with pytest.raises(ConfigError) as caught:
        read_stack_values(path)
    line = one_line(caught.value)
    assert "is not a regular file" in line and "no such stack file" not in line, line
