"""Reading a stack's configuration: from its file in stacks/ (`labctl`, tests) or from the running
Pulumi program (`pulumi up`), into one validated LabConfig."""

from __future__ import annotations

import json
from collections.abc import Mapping
from difflib import get_close_matches
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from lab.config.checks import cross_checks
from lab.config.facts import PROJECT, STACK_NAME
from lab.config.lab_config import LabConfig
from lab.config.messages import ConfigError, describe
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
    problems = []
    for key, value in config.items():
        namespace, name = _config_key(str(key))
        if not name:
            problems.append(f"{key}: keys must be written {PROJECT}:NAME, or NAMESPACE:NAME for others' keys")
        elif namespace != PROJECT and get_close_matches(namespace, [PROJECT], cutoff=0.75):
            problems.append(f"{key}: no such namespace {namespace!r}; the lab's keys are {PROJECT}:{name}")
        elif namespace == PROJECT and _encrypted(value):
            problems.append(_encrypted_problem(f"{PROJECT}:{name}"))
        elif namespace == PROJECT:
            values[name] = value
        # Other namespaces' keys (kubernetes:*, pulumi:*, a provider's) are theirs, as in `pulumi up`.
    if problems:
        raise ConfigError(str(path), problems)
    return values


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


class _UnreadableValue(yaml.constructor.ConstructorError):
    """Valid YAML holding a value Python cannot read."""


class _StackLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key written twice in one mapping instead of keeping the
    last value (YAML 1.2.2, 3.2.1.1: the keys of a mapping are unique)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<:` merges are overridden by the mapping's own keys on purpose
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, list | dict):
                continue  # unhashable: SafeLoader itself refuses it, with its position
            if key in seen:
                first = seen[key]
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first at line {first.line + 1}); keep one of them",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        # Python refuses to read an integer of more than 4300 digits (sys.get_int_max_str_digits).
        try:
            return super().construct_yaml_int(node)
        except ValueError:
            raise _UnreadableValue(
                None,
                None,
                f"a number of {len(str(node.value))} digits, far beyond what any key takes;"
                " write the value the key needs",
                node.start_mark,
            ) from None


_StackLoader.add_constructor("tag:yaml.org,2002:int", _StackLoader.construct_yaml_int)


def load_yaml(path: Path) -> Any:
    """A YAML file's content; ConfigError naming the file, line and column when it cannot be read."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise ConfigError(
            f"{path}:{line}:{column}",
            [f"byte 0x{data[err.start]:02x} is not UTF-8 text; save the file as UTF-8"],
        ) from None
    try:
        return yaml.load(text, Loader=_StackLoader)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = " ".join(str(err.problem or err.context or "unreadable").split())
        fix = "" if ";" in problem else "; fix the file at that position"
        kind = "" if isinstance(err, _UnreadableValue) else "not valid YAML: "
        raise ConfigError(where, [f"{kind}{problem}{fix}"]) from None
    except yaml.YAMLError as err:
        raise ConfigError(str(path), [f"not valid YAML: {' '.join(str(err).split())}"]) from None
    except RecursionError:
        raise ConfigError(
            str(path),
            [
                "nested too deeply to read (lists or mappings inside each other); a stack file"
                " needs a few levels at most"
            ],
        ) from None


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

    check_stack_name(pulumi.get_stack())
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
