"""Reading a stack's configuration: from its file in stacks/ (`labctl`, tests) or from the running
Pulumi program (`pulumi up`), into one validated LabConfig."""

from __future__ import annotations

import json
import os
import unicodedata
from collections.abc import Mapping
from difflib import get_close_matches
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from lab.config.checks import cross_checks
from lab.config.facts import PROJECT, STACK_NAME
from lab.config.lab_config import LabConfig
from lab.config.messages import ConfigError, describe
from lab.config.stack_yaml import load_yaml
from lab.paths import STACKS_DIR


def parse_config(values: Mapping[str, Any], source: str = "stack configuration") -> LabConfig:
    """Validate `k8scifar:*` values (prefix already stripped); raise ConfigError naming every problem."""
    try:
        cfg = LabConfig.model_validate(dict(values))
    except ValidationError as exc:
        problems = list(dict.fromkeys(describe(e) for e in exc.errors()))
        raise ConfigError(source, problems) from None
    problems = cross_checks(cfg)
    if problems:
        raise ConfigError(source, problems)
    return cfg


def check_stack_name(stack: str) -> str:
    """`stack` when it is a stack name by Pulumi's rule and names no folder; ConfigError otherwise."""
    if not STACK_NAME.fullmatch(stack) or stack in {".", ".."}:
        raise ConfigError(
            "stack name",
            [
                f"{stack!r} is not one: use 1 to 100 letters, digits, '_', '.' and '-' (Pulumi's rule),"
                " other than . and .., such as lab"
            ],
        )
    return stack


def stack_file(stack: str, stacks_dir: Path = STACKS_DIR) -> Path:
    return stacks_dir / f"Pulumi.{check_stack_name(stack)}.yaml"


def stack_flags(stack: str, stacks_dir: Path = STACKS_DIR) -> str:
    """The `labctl` flags that name a stack, `--stacks-dir` only where it is not stacks/."""
    where = "" if Path(stacks_dir).resolve() == STACKS_DIR else f" --stacks-dir {stacks_dir}"
    return f"--stack {stack}{where}"


def read_stack_values(path: Path) -> dict[str, Any]:
    """The `k8scifar:*` values of a stack file, prefix stripped; ConfigError when unreadable."""
    if os.path.lexists(path) and not path.is_file():
        raise ConfigError(
            str(path),
            [
                "is not a regular file (a folder, a pipe, a device or a broken link); move it away"
                " and write the stack file there, or create one with `labctl init`"
            ],
        )
    if not path.is_file():
        existing = ", ".join(all_stacks(path.parent)) or "none"
        raise ConfigError(
            str(path),
            [f"no such stack file; existing stacks: {existing} (create one with `labctl init`)"],
        )
    doc = load_yaml(path) or {}
    config = doc.get("config") if isinstance(doc, dict) else None
    if not isinstance(config, dict):
        raise ConfigError(str(path), ["has no `config:` mapping with k8scifar:* keys"])
    values: dict[str, Any] = {}
    spelled: dict[tuple[str, str], str] = {}
    problems = []
    for key, value in config.items():
        namespace, name = _config_key(str(key))
        if not name:
            problems.append(f"{key}: keys must be written {PROJECT}:NAME, or NAMESPACE:NAME for others' keys")
            continue
        if (namespace, name) in spelled:
            # Pulumi reads both spellings into one Go map in no fixed order (pulumi/pulumi
            # sdk/go/common/resource/config/map.go, Map.UnmarshalYAML): either value may win.
            problems.append(
                f"{spelled[namespace, name]} and {key} are one key to Pulumi, which keeps either"
                f" value at random; keep only {namespace}:{name}"
            )
            continue
        spelled[namespace, name] = str(key)
        if namespace != PROJECT and _looks_like_project(namespace):
            # Pulumi's namespaces are exact: `pulumi up` would leave such a key to nobody.
            exact = " (Pulumi's namespaces are exact)" if _folded(namespace) == PROJECT else ""
            problems.append(
                f"{key}: no such namespace {namespace!r}{exact}; the lab's keys are {PROJECT}:{name}"
            )
        elif namespace == PROJECT and _encrypted(value):
            problems.append(_encrypted_problem(f"{PROJECT}:{name}"))
        elif namespace == PROJECT:
            values[name] = value
        # Other namespaces' keys (kubernetes:*, pulumi:*, a provider's) are theirs, as in `pulumi up`.
    if problems:
        raise ConfigError(str(path), problems)
    return values


def _folded(namespace: str) -> str:
    return unicodedata.normalize("NFKC", namespace).casefold().strip()


def _looks_like_project(namespace: str) -> bool:
    """A namespace that is the lab's but for case, width, blanks or a slip of the keyboard."""
    folded = _folded(namespace)
    return folded == PROJECT or bool(get_close_matches(folded, [PROJECT], cutoff=0.75))


def _config_key(key: str) -> tuple[str, str]:
    """(namespace, name) as Pulumi reads a stack file's key: `NAMESPACE:NAME`, or the older
    `NAMESPACE:config:NAME` (pulumi/pulumi sdk/go/common/resource/config/key.go, ParseKey); a
    name of "" when the key is neither."""
    parts = key.split(":")
    if len(parts) == 2 and all(parts):
        return parts[0], parts[1]
    if len(parts) == 3 and parts[1] == "config" and parts[0] and parts[2]:
        return parts[0], parts[2]
    return key, ""


def _encrypted(value: Any) -> bool:
    """Whether `value` holds a `secure:` value anywhere (Pulumi writes `{secure: CIPHERTEXT}`)."""
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            if list(item) == ["secure"] and isinstance(item["secure"], str):
                return True
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
    return False


def _encrypted_problem(key: str) -> str:
    # Every value of the lab ends up in plain text in the inventory, the state and on the nodes:
    # encrypting it in the stack file would only pretend to keep it secret.
    return (
        f"{key}: is stored encrypted (secure:), but the lab keeps no value of its stack"
        " file secret; set it in plain text (`pulumi config set` without --secret)"
    )


def load_stack(stack: str, stacks_dir: Path = STACKS_DIR) -> LabConfig:
    """The validated configuration of `stacks/Pulumi.<stack>.yaml`."""
    path = stack_file(stack, stacks_dir)
    return parse_config(read_stack_values(path), source=str(path))


def from_pulumi() -> LabConfig:
    """The validated configuration of the running Pulumi stack, every `k8scifar:*` key of it.

    The language host hands the program the stack's whole configuration as strings, objects and
    lists as JSON, `secure:` values decrypted, their keys listed as secret, in PULUMI_CONFIG and
    PULUMI_CONFIG_SECRET_KEYS (pulumi/pulumi: sdk/python/cmd/pulumi-language-python/main.go), and
    the SDK's launcher loads both before the program starts (sdk/python/cmd/
    pulumi-language-python-exec: set_all_config). Keys of other namespaces (`kubernetes:*`,
    `pulumi:*`) belong to others and are left alone.
    """
    import pulumi
    from pulumi.runtime import config as runtime_config

    path = stack_file(pulumi.get_stack())
    if path.is_file():
        # The file the Pulumi CLI has just read: one it reads differently from labctl stops here.
        read_stack_values(path)
    prefix = f"{PROJECT}:"
    names = set(runtime_config.get_config_env()) | set(runtime_config.CONFIG.get())
    values: dict[str, Any] = {}
    problems = []
    for key in sorted(k for k in names if k.startswith(prefix)):
        if runtime_config.is_config_secret(key):
            problems.append(_encrypted_problem(key))
            continue
        values[key.removeprefix(prefix)] = _from_text(runtime_config.get_config(key))
    source = f"stack {pulumi.get_stack()!r}"
    if problems:
        raise ConfigError(source, problems)
    return parse_config(values, source=source)


def _from_text(raw: str) -> Any:
    """A value as the stack file holds it: objects and lists come as JSON, scalars as their text,
    which the model converts as it converts the stack file's own scalars."""
    if raw.lstrip().startswith(("{", "[")):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def all_stacks(stacks_dir: Path = STACKS_DIR) -> list[str]:
    names = (p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in stacks_dir.glob("Pulumi.*.yaml"))
    return sorted(name for name in names if STACK_NAME.fullmatch(name) and name not in {".", ".."})
