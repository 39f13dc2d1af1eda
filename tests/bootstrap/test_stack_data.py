"""No value of a stack file, a command line or the environment is ever evaluated by Ansible.

Every string field of the configuration model, found by walking the model (a field added later is
covered without a change here), gets a `{{ lookup('pipe', 'touch FILE') }}` marker: the loader
refuses it with one line naming the key, or it reaches the real playbook process as `labctl hosts
up` and `pulumi up` run it (the provider of lab.bootstrap.resource, ansible-runner,
ansible-playbook), together with a state folder from the environment that holds a marker too,
against a node that refuses the connection. Ansible reads every connection variable before it
connects; no marker file appears.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import tarfile
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from lab.bootstrap.inventory import build_inventory
from lab.config import ConfigError, LabConfig, parse_config
from lab.config.fields import nested_model
from tests.support.lookup_marker import marker

ANSIBLE_INVENTORY = Path(sys.executable).parent / "ansible-inventory"
STACK = "fuzz"


def _admits_text(annotation: Any) -> bool:
    """Whether a field of this type takes a string (an enum's value or free text)."""
    if isinstance(annotation, type):
        return issubclass(annotation, str)
    if typing.get_origin(annotation) in {list, dict}:
        return False
    return any(_admits_text(arg) for arg in typing.get_args(annotation))


def _container(annotation: Any, kind: type) -> tuple[Any, ...] | None:
    """The item types of a list or dict field (through Annotated and Optional), or None."""
    if typing.get_origin(annotation) is kind:
        return typing.get_args(annotation)
    for arg in typing.get_args(annotation):
        found = _container(arg, kind)
        if found is not None:
            return found
    return None


def text_fields(
    model: type[BaseModel] = LabConfig, where: tuple[str | int, ...] = ()
) -> list[tuple[Any, ...]]:
    """(path, kind) of every place of the model a string goes: kind is `value` (the field itself),
    `item` (a list's items), `dict value` or `dict key`. Paths use the stack file's keys."""
    found: list[tuple[Any, ...]] = []
    for name, field in model.model_fields.items():
        key = field.alias or name
        annotation = field.annotation
        inner = nested_model(annotation)
        listed = _container(annotation, list)
        mapped = _container(annotation, dict)
        if inner is not None and mapped is None:
            found += text_fields(inner, (*where, key, 0) if listed else (*where, key))
        elif mapped is not None:
            if _admits_text(mapped[0]):
                found.append(((*where, key), "dict key"))
            value = mapped[1]
            items = _container(value, list)
            if _admits_text(value) or (items is not None and _admits_text(items[0])):
                found.append(((*where, key), "dict value"))
            assert nested_model(value) is None or not text_fields(nested_model(value)), (
                f"{key}: a model inside a mapping holds text; teach this walker its path"
            )
        elif listed is not None and _admits_text(listed[0]):
            found.append(((*where, key), "item"))
        elif _admits_text(annotation):
            found.append(((*where, key), "value"))
    return found


def _release_files(folder: Path) -> tuple[Path, Path]:
    """A stand-in k3s binary (an ELF header) and images tarball (a real tar), readable by all."""
    folder.mkdir(parents=True, exist_ok=True)
    binary, images = folder / "k3s", folder / "k3s-airgap-images-amd64.tar"
    binary.write_bytes(b"\x7fELF" + bytes(60))
    with tarfile.open(images, "w") as archive:
        archive.add(binary, "k3s")
    for path in (binary, images):
        path.chmod(0o644)
    return binary, images


def base_values(files: Path) -> dict[str, Any]:
    """A valid stack with every optional section present, its one node refusing SSH (port 1)."""
    binary, images = _release_files(files)
    return {
        "nodes": [{"name": "solo", "address": "127.0.0.1", "user": "lab", "role": "server"}],
        "ssh": {"keyPath": str(files / "id_ed25519"), "port": 1, "hostKeyPolicy": "accept-new"},
        "airgap": {"k3sBinary": str(binary), "imagesTarball": str(images)},
        "nfs": {"server": "solo", "allowedNetworks": ["127.0.0.1/32"]},
        "sweep": {"parameters": {"learningRate": [0.1], "model": ["airbench"]}},
        "skip": {"nfsServerStart": "no NFS server here"},
        "scheduling": {"gang": "none"},
    }


def _get(values: dict[str, Any], path: tuple[Any, ...]) -> Any:
    """The mapping at `path`, made where a section the base leaves out would be."""
    for part in path:
        values = values[part] if isinstance(part, int) else values.setdefault(part, {})
    return values


def place(values: dict[str, Any], path: tuple[Any, ...], kind: str, text: str, files: Path) -> None:
    """Put `text` at `path` of `values` as a string of that kind; a file path stays a file there."""
    *parents, last = path
    target = _get(values, tuple(parents))
    current = target.get(last)
    if kind == "value" and isinstance(current, str) and Path(current).is_file():
        # A path that must name a file: the marker becomes a folder on the way to a real one.
        real = Path(current)
        moved = files / text.lstrip("/") / real.name
        moved.parent.mkdir(parents=True, exist_ok=True)
        moved.write_bytes(real.read_bytes())
        moved.chmod(0o644)
        target[last] = str(moved)
    elif kind == "value":
        target[last] = text
    elif kind == "item":
        target[last] = [text]
    elif kind == "dict value":
        key, old = next(iter(target[last].items()))
        target[last] = {key: [text] if isinstance(old, list) else text}
    else:
        target[last] = {text: next(iter(target[last].values()))}


def _dotted(path: tuple[Any, ...]) -> str:
    return "k8scifar:" + ".".join(f"[{p}]" if isinstance(p, int) else p for p in path).replace(".[", "[")


def test_the_walk_finds_the_fields_a_stack_file_writes_text_into() -> None:
    """The walker itself: it must see free text, paths, names, enums, lists and mappings."""
    paths = {(path, kind) for path, kind in text_fields()}
    for expected in [
        (("ssh", "keyPath"), "value"),
        (("airgap", "k3sBinary"), "value"),
        (("nodes", 0, "name"), "value"),
        (("nodes", 0, "role"), "value"),
        (("nfs", "allowedNetworks"), "item"),
        (("skip",), "dict key"),
        (("skip",), "dict value"),
        (("sweep", "parameters"), "dict value"),
    ]:
        assert expected in paths, f"{expected} not found in {sorted(paths, key=str)}"


def test_no_stack_value_or_state_folder_is_ever_evaluated(tmp_path: Path) -> None:
    markers, files = tmp_path / "markers", tmp_path / "files"
    markers.mkdir()
    base = base_values(files)
    parse_config(base)  # the base itself is valid

    accepted = copy.deepcopy(base)
    refused = []
    for n, (path, kind) in enumerate(text_fields()):
        values = copy.deepcopy(base)
        text = marker(markers, f"field-{n}")
        place(values, path, kind, text, files)
        try:
            parse_config(values)
        except ConfigError as err:
            named = [p for p in err.problems if p.startswith(_dotted(path))]
            assert named and all("\n" not in p for p in err.problems), (path, err.problems)
            refused.append(path)
            continue
        place(accepted, path, kind, text, files)

    assert ("ssh", "keyPath") not in refused, "a key path of ordinary characters must stay usable"
    lab = parse_config(accepted)
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    (stacks / f"Pulumi.{STACK}.yaml").write_text(
        yaml.safe_dump({"config": {f"k8scifar:{k}": v for k, v in accepted.items()}})
    )
    # The state folder comes from the environment: a space and a marker in it.
    state = tmp_path / f"state dir {marker(markers, 'state')}"
    env = {**os.environ, "K8SCIFAR_STATE_DIR": str(state), "COLUMNS": "250"}
    for action in ("up", "down"):
        done = subprocess.run(
            [sys.executable, "-m", "lab.cli", "hosts", action, "--stack", STACK, "--stacks-dir", str(stacks)],
            capture_output=True, text=True, env=env, timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == 2, done.stdout + done.stderr
        # ssh got its options whole: it tried the node, which refused, and resolved no stray word.
        assert "Connection refused" in done.stderr, done.stderr
        assert "Could not resolve hostname" not in done.stderr
    # What testinfra reads the validation inventory with.
    inventory = tmp_path / "validate-inventory.yml"
    inventory.write_text(yaml.safe_dump(build_inventory(lab, state / STACK / "known_hosts")))
    subprocess.run([str(ANSIBLE_INVENTORY), "-i", str(inventory), "--list"], capture_output=True, check=True)

    assert sorted(p.name for p in markers.iterdir()) == [], "a stack value or the state folder ran as code"
