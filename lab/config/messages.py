"""What the operator reads when the configuration is wrong: one line per bad key, naming the key,
what its value should be and how to fix it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic.alias_generators import to_snake

from lab.config.facts import DNS_LABEL, DNS_SUBDOMAIN, INTERFACE_NAME, USER_NAME
from lab.config.workload import SWEEP_PARAMETERS
from trainer.hyperparameters import HYPERPARAMETERS, Rule

# What a value that misses each pattern should be, and how to fix it, for the one-line message.
PATTERN_RULES = {
    DNS_LABEL: "a lowercase DNS label (letters, digits, '-')",
    USER_NAME: "a POSIX user name (letters, digits, '.', '_', '-', a letter or '_' first, at most"
    " 32 characters); write the account's login name",
    DNS_SUBDOMAIN: "a Kubernetes object name (lowercase DNS labels joined by '.'); write the name"
    " `kubectl get storageclass` shows",
    INTERFACE_NAME: "a network interface name (1 to 15 letters, digits, '_', '.', ':', '@' or '-');"
    " write the name `ip -brief link` shows on the node, such as eth0 or enp3s0",
}
# Unquoted, these words are booleans to YAML 1.1 (https://yaml.org/type/bool.html) and to
# gopkg.in/yaml.v2, not to the Pulumi CLI's gopkg.in/yaml.v3: a stack file holding one unquoted is
# refused when it is read (lab/config/stack_yaml.py); values from elsewhere are explained here.
YAML_BOOLEAN_WORDS = {
    False: ("off", "no", "false", "n"),
    True: ("on", "yes", "true", "y"),
}
# Keys that moved, as stack files spell them, and where each fact is written now: one message says
# where, instead of "unknown key".
MOVED_KEYS = {
    ("scheduling", "kueueInstalled"): "provides.kueue",
}
# Beyond this many characters a value is cut short where a message quotes it.
SHOWN_CHARACTERS = 40


class ConfigError(ValueError):
    """A stack configuration that cannot build a lab. The message names every bad key and its fix."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"invalid lab configuration in {source}:\n{lines}")


def _path(loc: tuple[int | str, ...]) -> str:
    out = "k8scifar:"
    for i, part in enumerate(loc):
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if i else "") + part
    return out


def _trainer_rule(loc: tuple[int | str, ...]) -> Rule | None:
    """The numeric rule of a `trainer.*` key, which the trainer's flag enforces too; a choice keeps
    its enum's message."""
    if len(loc) != 2 or loc[0] != "trainer" or not isinstance(loc[1], str):
        return None
    row = HYPERPARAMETERS.get(SWEEP_PARAMETERS.get(loc[1]) or to_snake(loc[1]))
    return row.rule if row is not None and isinstance(row.rule, Rule) else None


def _shown(value: Any) -> str:
    """`value` as a message quotes it: its repr, cut short when long (a 5000-digit number)."""
    text = repr(value)
    if len(text) <= SHOWN_CHARACTERS:
        return text
    # The length of what was written, not of its repr's quotes and escapes.
    written = value if isinstance(value, str) else text
    return f"{text[:SHOWN_CHARACTERS]}... ({len(written)} characters)"


def _unquoted_word(value: bool, expected: str) -> str | None:
    """The word an unquoted YAML boolean was probably meant to be, when the key accepts it."""
    return next((w for w in YAML_BOOLEAN_WORDS[value] if f"'{w}'" in expected), None)


def _choice(err: Mapping[str, Any], message: str) -> str:
    """A value outside a key's choices, the choices as written (a YAML boolean explained)."""
    value, expected = err.get("input"), str(err.get("ctx", {}).get("expected", ""))
    choices = message[0].lower() + message[1:]
    if isinstance(value, bool):
        word = _unquoted_word(value, expected)
        words = YAML_BOOLEAN_WORDS[value]
        written = f"an unquoted {word or ', '.join(words[:-1]) + ' or ' + words[-1]}"
        fix = f'write it in quotes: "{word}"' if word else choices
        return f"{written} reads as {str(value).lower()} in YAML; {fix}"
    return f"{_shown(value)}: {choices}"


def describe(err: Mapping[str, Any]) -> str:
    loc = tuple(p for p in err["loc"] if p not in {"list[union[float,int,str]]", "Range", "[key]"})
    kind = err["type"]
    if kind == "extra_forbidden" and loc in MOVED_KEYS:
        return (
            f"{_path(loc)}: moved to k8scifar:{MOVED_KEYS[loc]}, which says the same; write it there"
            " and remove this key"
        )
    if kind == "extra_forbidden":
        return f"{_path(loc)}: unknown key; check its spelling against docs/configuration.md"
    if kind == "missing":
        return f"{_path(loc)}: required key is missing"
    message = str(err["msg"]).removeprefix("Value error, ")
    rule = _trainer_rule(loc)
    if err["loc"][-1:] == ("[key]",):
        expected = err.get("ctx", {}).get("expected", "")
        message = f"unknown key; the keys are {expected}" if expected else message
    elif rule is not None and "input" in err:
        message = f"must be {rule.describe()}, got {_shown(err['input'])}"
    elif kind.startswith("string_pattern"):
        pattern = err.get("ctx", {}).get("pattern")
        message = f"{_shown(err.get('input'))} is not {PATTERN_RULES.get(pattern, f'of the form {pattern}')}"
    elif kind in {"enum", "literal_error"}:
        message = _choice(err, message)
    elif kind == "int_parsing_size":
        message = f"a number of {len(str(err.get('input')))} digits, far beyond what the key takes"
    elif "input" in err and kind not in {"value_error", "assertion_error"}:
        message = f"{message} (got {_shown(err['input'])})"
    return f"{_path(loc)}: {message}"
