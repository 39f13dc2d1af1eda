"""A stack file means one thing to every reader or is refused in one line naming the key and the
fix: unquoted values YAML 1.1 (labctl), the Pulumi CLI's gopkg.in/yaml.v3, yaml.v2 and YAML 1.2
read differently, two spellings of one key, a namespace that is the lab's but for case, and
aliases that expand without bound."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from lab.cli.common.console import one_line
from lab.config import ConfigError, load_stack, read_stack_values
from tests.support.labctl import assert_one_line_error, labctl

NODES = """\
  k8scifar:nodes:
    - name: {name}
      address: 192.168.50.11
      user: {user}
      role: server
"""


def _file(tmp_path: Path, body: str, name: str = "gpu-a", user: str = "ubuntu") -> Path:
    path = tmp_path / "Pulumi.new.yaml"
    path.write_text("config:\n" + NODES.format(name=name, user=user) + body)
    return path


def _refusal(path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        read_stack_values(path)
    line = one_line(caught.value)
    assert "\n" not in line
    return line


# (what, where the value goes, the value as written, the key the line names)
AMBIGUOUS = [
    ("a YAML 1.1 octal port", "  k8scifar:ssh:\n    port: {v}\n", "0022", "k8scifar:ssh.port"),
    ("a signed octal", "  k8scifar:trainer:\n    seed: {v}\n", "+0017", "k8scifar:trainer.seed"),
    (
        "a leading zero that is no octal",
        "  k8scifar:trainer:\n    epochs: {v}\n",
        "08",
        "k8scifar:trainer.epochs",
    ),
    ("a YAML 1.2 octal", "  k8scifar:trainer:\n    port: {v}\n", "0o71234", "k8scifar:trainer.port"),
    ("a capital hex prefix", "  k8scifar:registry:\n    port: {v}\n", "0X7774", "k8scifar:registry.port"),
    ("a binary number", "  k8scifar:trainer:\n    seed: {v}\n", "0b101", "k8scifar:trainer.seed"),
    (
        "digits with underscores",
        "  k8scifar:trainer:\n    batchSize: {v}\n",
        "1_024",
        "k8scifar:trainer.batchSize",
    ),
    (
        "a sexagesimal epoch count",
        "  k8scifar:trainer:\n    epochs: {v}\n",
        "1:30",
        "k8scifar:trainer.epochs",
    ),
    (
        "a number past 2**64",
        "  k8scifar:trainer:\n    seed: {v}\n",
        "18446744073709551617",
        "k8scifar:trainer.seed",
    ),
    (
        "a YAML 1.1 boolean word",
        "  k8scifar:nfs:\n    purgeOnDestroy: {v}\n",
        "yes",
        "k8scifar:nfs.purgeOnDestroy",
    ),
    ("on as a policy", "  k8scifar:ssh:\n    hostKeyPolicy: {v}\n", "On", "k8scifar:ssh.hostKeyPolicy"),
    ("a date", "  k8scifar:namespace: {v}\n", "2024-01-01", "k8scifar:namespace"),
    (
        "a sweep value",
        "  k8scifar:sweep:\n    parameters:\n      epochs: [2, {v}]\n",
        "0o3",
        "k8scifar:sweep.parameters.epochs[1]",
    ),
    ("a key", "  k8scifar:skip:\n    {v}: why\n", "off", "k8scifar:skip.off (the key)"),
    ("another namespace's value", "  aws:region: {v}\n", "no", "aws:region"),
]


@pytest.mark.parametrize(("what", "body", "value", "key"), AMBIGUOUS, ids=[a[0] for a in AMBIGUOUS])
def test_a_value_readers_take_differently_is_refused_naming_the_key(
    what: str, body: str, value: str, key: str, tmp_path: Path
) -> None:
    line = _refusal(_file(tmp_path, body.format(v=value)))
    assert f"{key} (line " in line and f"unquoted {value} is " in line, f"{what}: {line}"
    assert f'write it in quotes ("{value}")' in line, f"{what}: {line}"
    # Quoted, it is text to every reader.
    quoted = body.format(v=f'"{value}"')
    read_stack_values(_file(tmp_path, quoted))


@pytest.mark.parametrize(("field", "value"), [("name", "y"), ("name", "n"), ("user", "N"), ("user", "off")])
def test_node_names_and_users_some_reader_takes_for_booleans(field: str, value: str, tmp_path: Path) -> None:
    line = _refusal(_file(tmp_path, "", **{field: value}))
    assert f"k8scifar:nodes[0].{field} (line " in line and ("true" in line or "false" in line), line
    assert f'"{value}"' in line


def test_what_every_reader_takes_alike_still_loads(tmp_path: Path) -> None:
    body = (
        "  k8scifar:ssh:\n    port: 2222\n    hostKeyPolicy: strict\n"
        "  k8scifar:nfs:\n    purgeOnDestroy: true\n    allowedNetworks: [192.168.50.0/24]\n"
        "  k8scifar:kubernetesVersion: 1.33.5\n"
        "  k8scifar:trainer:\n    learningRate: 1e-3\n    targetAccuracy: .93\n    seed: 0\n"
        "  k8scifar:registry:\n    port: 0x7774\n"
        "  k8scifar:observability:\n    enabled: false\n    metricsPort: 9464\n"
    )
    values = read_stack_values(_file(tmp_path, body))
    assert values["ssh"] == {"port": 2222, "hostKeyPolicy": "strict"}
    assert values["registry"]["port"] == 0x7774 and values["kubernetesVersion"] == "1.33.5"
    cfg = load_stack("new", tmp_path)
    assert cfg.trainer.learning_rate == pytest.approx(1e-3) and cfg.trainer.target_accuracy == 0.93
    for shipped in ("example-cpu", "example-gpu", "example-kubeadm", "example-sweep", "testbed"):
        load_stack(shipped)


def test_the_old_and_the_new_spelling_of_one_key_are_refused(tmp_path: Path) -> None:
    body = "  k8scifar:namespace: lab-one\n  k8scifar:config:namespace: lab-two\n"
    line = _refusal(_file(tmp_path, body))
    assert "k8scifar:namespace and k8scifar:config:namespace are one key to Pulumi" in line
    assert "keep only k8scifar:namespace" in line
    # Either spelling alone is the key.
    assert (
        load_stack("new", _file(tmp_path, "  k8scifar:config:namespace: lab-two\n").parent).namespace
        == "lab-two"
    )


@pytest.mark.parametrize("namespace", ["K8SCIFAR", "K8sCifar", "k8sciFAR", "ｋ８ｓｃｉｆａｒ", "k8scifar "])
def test_a_namespace_that_is_the_labs_but_for_case_or_width_is_refused(
    namespace: str, tmp_path: Path
) -> None:
    line = _refusal(_file(tmp_path, f'  "{namespace}:namespace": lab-one\n'))
    assert f"no such namespace {namespace!r}" in line and "the lab's keys are k8scifar:namespace" in line


def _bomb(levels: int, width: int = 9) -> str:
    lines = ['l0: &l0 ["lol"]']
    for i in range(1, levels + 1):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]")
    return "\n".join(lines) + f"\nconfig:\n  k8scifar:nodes: *l{levels}\n"


@pytest.mark.parametrize(("levels", "width"), [(8, 9), (30, 2), (3, 60)])
def test_an_alias_bomb_is_refused_at_once(levels: int, width: int, tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.new.yaml"
    path.write_text(_bomb(levels, width))
    assert path.stat().st_size < 1500
    started = time.monotonic()
    line = _refusal(path)
    assert time.monotonic() - started < 2, "reading the file took seconds"
    assert "aliases (*name) expand to more than" in line and "write the values out" in line


def test_a_file_of_many_keys_and_no_alias_is_not_said_to_expand_aliases(tmp_path: Path) -> None:
    keys = "".join(f"  other:k{n}: v\n" for n in range(10_001))
    line = _refusal(_file(tmp_path, keys))
    assert "holds more than 10000 values" in line and "aliases" not in line, line


def test_a_bomb_is_one_line_from_labctl_within_seconds(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.new.yaml").write_text(_bomb(9))
    started = time.monotonic()
    result = labctl("validate", "--stack", "new", "--stacks-dir", tmp_path)
    assert time.monotonic() - started < 30
    assert_one_line_error(result, "aliases (*name) expand to more than")


def test_aliases_that_stay_small_and_merges_still_load(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.new.yaml"
    path.write_text(
        "node: &node {user: ubuntu, role: agent}\nconfig:\n  k8scifar:nodes:\n"
        "    - {<<: *node, name: a, address: 192.168.50.11, role: server}\n"
        "    - {<<: *node, name: b, address: 192.168.50.12}\n"
    )
    assert [n["role"] for n in read_stack_values(path)["nodes"]] == ["server", "agent"]


def test_an_alias_inside_its_own_value_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.new.yaml"
    path.write_text("config:\n  k8scifar:nodes: &loop [*loop]\n")
    assert "an alias refers to a value that holds it" in _refusal(path)


@pytest.mark.parametrize(
    "tagged", ["!!int '22'", "!!float 1", "!!binary aGk=", "!!set {a, b}", "!!timestamp 2024-01-01"]
)
def test_explicit_tags_are_refused(tagged: str, tmp_path: Path) -> None:
    line = _refusal(_file(tmp_path, f"  k8scifar:namespace: {tagged}\n"))
    assert "k8scifar:namespace (line 7): the tag !!" in line and "remove it" in line


def test_a_value_pyyaml_cannot_read_is_one_line(tmp_path: Path) -> None:
    for value in ("=", "2024-13-45"):
        line = _refusal(_file(tmp_path, f"  k8scifar:namespace: {value}\n"))
        assert "k8scifar:namespace (line 7)" in line and f'"{value}"' in line, line


def test_labctl_names_the_key_in_one_line(tmp_path: Path) -> None:
    _file(tmp_path, "  k8scifar:ssh:\n    port: 0022\n")
    result = labctl("validate", "--stack", "new", "--stacks-dir", tmp_path)
    assert_one_line_error(result, "k8scifar:ssh.port (line 8): unquoted 0022 is the number 18", "22")


# How gopkg.in/yaml.v3 v3.0.1 and gopkg.in/yaml.v2 v2.4.0 decode `v: TEXT` into a plain Go value
# (yaml.Unmarshal into interface{}, as the Pulumi CLI decodes a stack file first), recorded from
# the libraries themselves: the port in lab/config/stack_yaml.py must agree.
GO_READINGS = [
    ("0022", ("number", 18), ("number", 18)),
    ("089", ("number", 89.0), ("number", 89.0)),
    ("00", ("number", 0), ("number", 0)),
    ("0o17", ("number", 15), ("number", 15)),
    ("0O17", ("number", 15), ("number", 15)),
    ("0X1f", ("number", 31), ("number", 31)),
    ("-0x10", ("number", -16), ("number", -16)),
    ("0b101", ("number", 5), ("number", 5)),
    ("0b2", ("text", "0b2"), ("text", "0b2")),
    ("1_000", ("number", 1000), ("number", 1000)),
    ("_1", ("text", "_1"), ("text", "_1")),
    ("1_", ("number", 1), ("number", 1)),
    ("1E3", ("number", 1000.0), ("number", 1000.0)),
    ("1e-3", ("number", 0.001), ("number", 0.001)),
    ("+.5", ("number", 0.5), ("number", 0.5)),
    ("1.", ("number", 1.0), ("number", 1.0)),
    ("1e400", ("text", "1e400"), ("text", "1e400")),
    ("9223372036854775808", ("number", 9223372036854775808), ("number", 9223372036854775808)),
    ("18446744073709551616", ("number", 1.8446744073709552e19), ("number", 1.8446744073709552e19)),
    ("1:30", ("text", "1:30"), ("text", "1:30")),
    ("y", ("text", "y"), ("bool", True)),
    ("N", ("text", "N"), ("bool", False)),
    ("yes", ("text", "yes"), ("bool", True)),
    ("On", ("text", "On"), ("bool", True)),
    ("OFF", ("text", "OFF"), ("bool", False)),
    ("TRUE", ("bool", True), ("bool", True)),
    ("tRUE", ("text", "tRUE"), ("text", "tRUE")),
    ("~", ("null",), ("null",)),
    ("Null", ("null",), ("null",)),
    ("-.INF", ("number", -math.inf), ("number", -math.inf)),
    ("1.33.5", ("text", "1.33.5"), ("text", "1.33.5")),
    ("0x", ("text", "0x"), ("text", "0x")),
    ("+", ("text", "+"), ("text", "+")),
]


@pytest.mark.parametrize(("text", "v3", "v2"), GO_READINGS, ids=[g[0] for g in GO_READINGS])
def test_the_go_readers_port_agrees_with_the_libraries(text: str, v3: tuple, v2: tuple) -> None:
    from lab.config.stack_yaml import go_yaml

    assert go_yaml(text) == v3
    assert go_yaml(text, v2=True) == v2
    assert math.isnan(go_yaml(".NaN")[1])


@pytest.mark.parametrize("written", ["1.30", "1.3", "1"])
def test_an_unquoted_version_read_as_a_number_is_refused_with_the_fix(written: str, tmp_path: Path) -> None:
    _file(tmp_path, f"  k8scifar:kubernetesVersion: {written}\n")
    with pytest.raises(ConfigError) as caught:
        load_stack("new", tmp_path)
    line = one_line(caught.value)
    assert "k8scifar:kubernetesVersion: is a number" in line and "write the release in quotes" in line, line
    assert "valid string" not in line


@pytest.mark.parametrize("kind", ["comments", "sparse"])
def test_a_stack_file_larger_than_any_lab_needs_is_refused_by_its_size_before_it_is_parsed(
    kind: str, tmp_path: Path
) -> None:
    """A file of megabytes took labctl tens of seconds to parse (50 MB of comments: over 20 s), and
    one of gigabytes twice its size in memory (a 2 GiB sparse file: 4 GB resident)."""
    path = _file(tmp_path, "")
    with open(path, "a") as handle:
        if kind == "comments":
            handle.write(("#" + "a" * 1000 + "\n") * 3_000)
        else:
            handle.truncate(64 * 2**20)
    started = time.monotonic()
    line = _refusal(path)
    assert time.monotonic() - started < 2, "reading the file took seconds"
    assert "bytes, more than the" in line and "a lab's stack needs" in line, line
