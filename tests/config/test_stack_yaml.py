"""A stack file that is not clean YAML: one line naming the file, line and column, from the
program's reader and from labctl alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.cli.common.console import one_line
from lab.config import ConfigError, read_stack_values
from tests.support.labctl import Labctl, assert_one_line_error

NODES = """\
  k8scifar:nodes:
    - name: gpu-a
      address: 192.168.50.11
      user: ubuntu
      role: server
"""

BROKEN = [
    # (what, file content, line:column of the problem, a word of the message)
    (
        "duplicate top-level key",
        f"config:\n  k8scifar:namespace: one\n{NODES}  k8scifar:namespace: two\n".encode(),
        "8:3",
        "duplicate key 'k8scifar:namespace' (first at line 2)",
    ),
    (
        "duplicate key inside a node",
        f"config:\n{NODES}      address: 192.168.50.12\n".encode(),
        "7:7",
        "duplicate key 'address' (first at line 4)",
    ),
    (
        "not UTF-8",
        f"config:\n{NODES}".encode().replace(b"gpu-a", b"gpu-\xe4"),
        "3:17",
        "byte 0xe4 is not UTF-8",
    ),
    ("unclosed flow sequence", b"config: [unclosed\n", "2:1", "not valid YAML"),
    ("tab indentation", f"config:\n{NODES}\tk8scifar:namespace: x\n".encode(), "7:1", "not valid YAML"),
]


@pytest.mark.parametrize(("what", "content", "position", "problem"), BROKEN, ids=[b[0] for b in BROKEN])
def test_unreadable_yaml_is_one_line_with_its_position(
    what: str, content: bytes, position: str, problem: str, tmp_path: Path
) -> None:
    path = tmp_path / "Pulumi.bad.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as info:
        read_stack_values(path)
    line = one_line(info.value)
    assert "\n" not in line
    assert line.startswith(f"{path}:{position}: "), f"{what}: {line}"
    assert problem in line, f"{what}: {line}"


def test_merge_keys_are_not_duplicates(tmp_path: Path) -> None:
    """A `<<:` merge is overridden by the mapping's own keys on purpose, not written twice."""
    path = tmp_path / "Pulumi.merge.yaml"
    path.write_text(
        "base: &node {user: ubuntu, role: agent}\nconfig:\n  k8scifar:nodes:\n"
        "    - {<<: *node, name: a, address: 192.168.50.11, role: server}\n"
    )
    assert read_stack_values(path)["nodes"][0]["role"] == "server"


@pytest.mark.parametrize("what", ["duplicate top-level key", "not UTF-8"])
def test_labctl_reports_it_in_one_line(what: str, tmp_path: Path, labctl_in_process: Labctl) -> None:
    _, content, position, problem = next(b for b in BROKEN if b[0] == what)
    (tmp_path / "Pulumi.bad.yaml").write_bytes(content)
    result = labctl_in_process("status", "--stack", "bad", "--stacks-dir", tmp_path)
    assert_one_line_error(result, f"Pulumi.bad.yaml:{position}: ", problem)
