"""Reading a stack file so that it means one thing to every program that reads it, or refusing it.

Three readers meet in a stack file, and YAML lets an unquoted value mean different things to them:

- labctl, the tests and the program's own checks read it with PyYAML, which follows YAML 1.1
  (https://yaml.org/type/): `yes`, `on` and `off` are booleans, `1:30` is the number 90
  (sexagesimal), `0022` is octal 18, `1e3` is text.
- The Pulumi CLI reads it with gopkg.in/yaml.v3 (pulumi/pulumi sdk/go/common/encoding/marshal.go
  since pkg/v3.50.0; before that gopkg.in/yaml.v2). It decodes the whole file into plain values
  first (sdk/go/common/workspace/loaders.go, LoadProjectStackBytes: `var projectStackRaw any`),
  so each value is resolved by yaml.v3's resolve.go: only true/false are booleans, `1:30` is text
  ("Base 60 floats are a bad idea, were dropped in YAML 1.2, and are purposefully unsupported
  here"), `0022` is still octal 18 ("Octals from the 1.1 spec, spelled as 0777, are still decoded
  by default in v3 as well for compatibility"), `0o17` is 15, `1e3` is 1000 and `089` is 89.
  yaml.v2, in older Pulumi CLIs and other YAML 1.1 tools, adds `y`, `Y`, `n` and `N` to the
  booleans (its resolve.go resolveMapList).
- People and YAML 1.2 tools read it by the 1.2 core schema (YAML 1.2.2, 10.3.2): `0022` is 22.

A plain (unquoted) scalar whose readings differ is refused with the key, what each reader makes of
it and the fix (quote it, or write the number plainly). So are explicit tags other than `!!str`,
aliases that expand beyond MAX_VALUES values (a "billion laughs" file of a few hundred bytes
expands to millions: yaml.v3 bounds the same thing, decode.go allowedAliasRatio), a key written
twice in one mapping, and a number too long for Python to read.
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from lab.config.messages import ConfigError

# Values (scalars, lists and mappings) a stack file may hold once its aliases are expanded; the
# largest example stack holds about a hundred.
MAX_VALUES = 10_000
# The bytes a stack file may hold, read before it is parsed: room for MAX_VALUES values of about a
# hundred bytes each, where the largest example stack holds under 3 KiB. PyYAML parses about 2 MB a
# second, and holds a file twice over (its bytes and its text) while it does.
MAX_FILE_BYTES = 1 << 20
# Readers of a stack file, as messages name them.
PYYAML = "labctl (YAML 1.1)"
GO_YAML_V3 = "the Pulumi CLI (yaml.v3)"
GO_YAML_V2 = "older Pulumi CLIs (yaml.v2)"
YAML_12 = "YAML 1.2"
STR_TAG = "tag:yaml.org,2002:str"
MERGE_TAG = "tag:yaml.org,2002:merge"
MAP_TAG = "tag:yaml.org,2002:map"
SEQ_TAG = "tag:yaml.org,2002:seq"

# A reading: ("null",), ("bool", b), ("number", x), ("text", s), ("date", s), ("unreadable", why).
Reading = tuple[Any, ...]


class StackFileProblems(Exception):
    """Problems found in a stack file before any value of it is used; each names its key."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


# --- gopkg.in/yaml.v3 and yaml.v2: resolve.go, ported --------------------------------------------

# resolve.go's resolveMap, shared by both versions; yaml.v2 adds the YAML 1.1 words.
_GO_MAP: dict[str, Reading] = {
    **{w: ("bool", True) for w in ("true", "True", "TRUE")},
    **{w: ("bool", False) for w in ("false", "False", "FALSE")},
    **{w: ("null",) for w in ("", "~", "null", "Null", "NULL")},
    **{w: ("number", math.nan) for w in (".nan", ".NaN", ".NAN")},
    **{w: ("number", math.inf) for w in (".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF")},
    **{w: ("number", -math.inf) for w in ("-.inf", "-.Inf", "-.INF")},
}
_GO_V2_WORDS: dict[str, Reading] = {
    **{w: ("bool", True) for w in ("y", "Y", "yes", "Yes", "YES", "on", "On", "ON")},
    **{w: ("bool", False) for w in ("n", "N", "no", "No", "NO", "off", "Off", "OFF")},
}
# resolve.go's yamlStyleFloat, the gate before strconv.ParseFloat.
_GO_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
# A superset of the dates either library resolves (resolve.go parseTimestamp, YAML 1.1's
# timestamp): no key of the lab takes a date, so anything shaped like one is refused.
_DATE = re.compile(r"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}([Tt ].*)?")
_GO_DIGITS = {2: "01", 8: "01234567", 10: "0123456789", 16: "0123456789abcdefABCDEF"}


def _go_parse_uint(text: str) -> int | None:
    """strconv.ParseUint(text, 0, 64): a 0b/0o/0x prefix or a leading 0 (octal) picks the base."""
    base, digits = 10, text
    if text[:1] == "0":
        prefix = text[1:2].lower()
        if len(text) >= 3 and prefix in ("b", "o", "x"):
            base, digits = {"b": 2, "o": 8, "x": 16}[prefix], text[2:]
        else:
            base, digits = 8, text[1:]
    if (not digits and base != 8) or any(c not in _GO_DIGITS[base] for c in digits):
        return None
    value = int(digits, base) if digits else 0
    return value if value < 2**64 else None


def _go_parse_int(text: str) -> int | None:
    """strconv.ParseInt(text, 0, 64): ParseUint after an optional sign, within int64."""
    negative = text[:1] == "-"
    magnitude = _go_parse_uint(text[1:] if text[:1] in "+-" else text) if text else None
    if magnitude is None or magnitude > 2**63 - (0 if negative else 1):
        return None
    return -magnitude if negative else magnitude


def _go_parse_float(text: str) -> float | None:
    """strconv.ParseFloat(text, 64) for the decimal forms yamlStyleFloat lets through: out of
    range is an error there, not infinity."""
    value = float(text)
    return None if math.isinf(value) else value


def go_yaml(text: str, v2: bool = False) -> Reading:
    """What gopkg.in/yaml.v3 (or v2) makes of a plain scalar (resolve.go, resolve with no tag)."""
    if not text:
        return ("null",)
    first = text[0]
    if first not in "+-0123456789yYnNtTfFoO~.":
        return ("text", text)
    if text in _GO_MAP:
        return _GO_MAP[text]
    if v2 and text in _GO_V2_WORDS:
        return _GO_V2_WORDS[text]
    if first == ".":
        found = _go_parse_float(text) if _GO_FLOAT.fullmatch(text) else None
        return ("text", text) if found is None else ("number", found)
    if first in "+-0123456789":
        if _DATE.fullmatch(text):
            # yaml.v2 hands a date back as its text where the target is a plain value.
            return ("text", text) if v2 else ("date", text)
        plain = text.replace("_", "")
        for number in (_go_parse_int(plain), None if plain[:1] in "+-" else _go_parse_uint(plain)):
            if number is not None:
                return ("number", number)
        if _GO_FLOAT.fullmatch(plain):
            found = _go_parse_float(plain)
            if found is not None:
                return ("number", found)
    return ("text", text)


# --- YAML 1.2 core schema (YAML 1.2.2, 10.3.2 Tag Resolution) -------------------------------------

_CORE: list[tuple[re.Pattern[str], Any]] = [
    (re.compile(r"null|Null|NULL|~|"), lambda t: ("null",)),
    (re.compile(r"true|True|TRUE"), lambda t: ("bool", True)),
    (re.compile(r"false|False|FALSE"), lambda t: ("bool", False)),
    (re.compile(r"[-+]?[0-9]+"), lambda t: ("number", int(t, 10))),
    (re.compile(r"0o[0-7]+"), lambda t: ("number", int(t[2:], 8))),
    (re.compile(r"0x[0-9a-fA-F]+"), lambda t: ("number", int(t[2:], 16))),
    (re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?"), lambda t: ("number", float(t))),
    (re.compile(r"[-+]?\.(inf|Inf|INF)"), lambda t: ("number", -math.inf if t[0] == "-" else math.inf)),
    (re.compile(r"\.(nan|NaN|NAN)"), lambda t: ("number", math.nan)),
]


def yaml12(text: str) -> Reading:
    """What a YAML 1.2 core-schema reader makes of a plain scalar."""
    for pattern, reading in _CORE:
        if pattern.fullmatch(text):
            return tuple(reading(text))
    return ("text", text)


# --- comparing readings -----------------------------------------------------------------------------

# Text that every number-typed key reads as the number it spells (lab.config's models convert
# text to numbers), written without leading zeros: `1e-3`, which YAML 1.1 leaves as text and
# YAML 1.2 reads as 0.001, means 0.001 either way.
_PLAIN_DECIMAL = re.compile(
    r"[-+]?(0|[1-9][0-9]*)(\.[0-9]*)?([eE][-+]?[0-9]+)?|[-+]?\.[0-9]+([eE][-+]?[0-9]+)?"
)


def _same(a: Reading, b: Reading) -> bool:
    if a[0] == "date" or b[0] == "date" or a[0] == "unreadable" or b[0] == "unreadable":
        return False
    if a[0] == b[0] == "number":
        x, y = a[1], b[1]
        return x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y))
    if {a[0], b[0]} == {"number", "text"}:
        (number,), (text,) = (r[1:] for r in sorted((a, b)))
        if not _PLAIN_DECIMAL.fullmatch(text):
            return False
        value = float(text)
        return not math.isinf(value) and value == number
    return a == b


def _shown(reading: Reading) -> str:
    kind = reading[0]
    if kind == "null":
        return "empty (null)"
    if kind == "bool":
        return str(reading[1]).lower()
    if kind == "number":
        value = reading[1]
        return f"the number {value:g}" if isinstance(value, float) else f"the number {value}"
    if kind == "date":
        return "a date"
    if kind == "unreadable":
        return "unreadable"
    return "text"


def _fix(text: str, readings: dict[str, Reading]) -> str:
    kinds = {r[0] for r in readings.values()}
    quoted = f'write it in quotes ("{text}") if it is text'
    if "bool" in kinds:
        return f"{quoted}, or true or false for a yes/no key"
    numbers = sorted(
        {f"{r[1]:g}" if isinstance(r[1], float) else str(r[1]) for r in readings.values() if r[0] == "number"}
    )
    if numbers:
        return f"{quoted}, or the number you mean in plain decimal ({' or '.join(numbers)})"
    return quoted


def _pyyaml(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Reading:
    """What PyYAML (YAML 1.1) makes of a plain scalar it resolved to `node.tag`."""
    try:
        value = loader.construct_object(node)
    except UnreadableValue:
        raise
    except (yaml.constructor.ConstructorError, ValueError) as err:
        return ("unreadable", " ".join(str(getattr(err, "problem", None) or err).split()))
    if value is None:
        return ("null",)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("number", value)
    if isinstance(value, datetime.date):
        return ("date", node.value)
    return ("text", str(value))


def _tag_problem(tag: str) -> str:
    return (
        f"the tag {tag.replace('tag:yaml.org,2002:', '!!')} is read differently by YAML 1.1 and 1.2"
        " readers, or not at all; remove it and write the value plainly"
    )


# --- the loader -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Walk:
    node: yaml.Node
    path: str


def _child(path: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if path in ("", "config"):
        return str(key)  # the stack's keys are named in full: k8scifar:nodes
    return f"{path}.{key}"


class StackLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses what readers of the file would take differently (see the
    module's docstring), a key written twice in one mapping (YAML 1.2.2, 3.2.1.1: the keys of a
    mapping are unique), aliases expanded beyond MAX_VALUES and numbers Python cannot read."""

    def compose_scalar_node(self, anchor: str | None) -> yaml.ScalarNode:
        event = self.peek_event()
        node = super().compose_scalar_node(anchor)
        # `!!int 0022` forces what readers resolve differently anyway; `!` and `!!str` make text.
        setattr(node, "explicit_tag", event.tag not in (None, "!", STR_TAG, "!!str"))  # noqa: B010
        return node

    def get_single_data(self) -> Any:
        node = self.get_single_node()
        if node is None:
            return None
        problems = self.expansion_problems(node) or self.scalar_problems(node)
        if problems:
            raise StackFileProblems(problems)
        return self.construct_document(node)

    def expansion_problems(self, root: yaml.Node) -> list[str]:
        """The number of values `root` holds with its aliases expanded, refused above MAX_VALUES."""
        sizes: dict[int, int] = {}
        visiting: set[int] = set()
        aliased = False  # a node reached twice is an alias's

        def size(node: yaml.Node) -> int:
            nonlocal aliased
            key = id(node)
            if key in sizes:
                aliased = True
                return sizes[key]
            if key in visiting:
                raise StackFileProblems(
                    [
                        f"line {node.start_mark.line + 1}: an alias refers to a value that holds it"
                        "; write the value out instead of the alias"
                    ]
                )
            visiting.add(key)
            total = 1
            children: Iterator[yaml.Node]
            if isinstance(node, yaml.MappingNode):
                children = (n for pair in node.value for n in pair)
            elif isinstance(node, yaml.SequenceNode):
                children = iter(node.value)
            else:
                children = iter(())
            for child in children:
                total += size(child)
                if total > MAX_VALUES:
                    break
            visiting.discard(key)
            sizes[key] = total
            return total

        try:
            total = size(root)
        except StackFileProblems as err:
            return err.problems
        if total <= MAX_VALUES:
            return []
        if not aliased:
            return [
                f"it holds more than {MAX_VALUES} values, far more than a lab's stack needs; keep"
                " the keys the lab and your other programs read"
            ]
        return [
            f"its aliases (*name) expand to more than {MAX_VALUES} values, far more than a lab's"
            " stack needs; write the values out instead of nesting aliases"
        ]

    def walk(self, root: yaml.Node) -> Iterator[_Walk]:
        """Every node of the document once, with the key path that leads to it."""
        todo = [_Walk(root, "")]
        seen: set[int] = set()
        while todo:
            item = todo.pop()
            if id(item.node) in seen:
                continue  # an alias: checked where its anchor is
            seen.add(id(item.node))
            yield item
            if isinstance(item.node, yaml.MappingNode):
                for key_node, value_node in reversed(item.node.value):
                    name = key_node.value if isinstance(key_node, yaml.ScalarNode) else "?"
                    todo.append(_Walk(value_node, _child(item.path, name)))
                    todo.append(_Walk(key_node, f"{_child(item.path, name)} (the key)"))
            elif isinstance(item.node, yaml.SequenceNode):
                todo.extend(
                    _Walk(n, _child(item.path, i)) for i, n in reversed(list(enumerate(item.node.value)))
                )

    def scalar_problems(self, root: yaml.Node) -> list[str]:
        problems = []
        for item in self.walk(root):
            node = item.node
            where = f"{item.path or 'the document'} (line {node.start_mark.line + 1})"
            if not isinstance(node, yaml.ScalarNode):
                if node.tag not in (MAP_TAG, SEQ_TAG):
                    problems.append(f"{where}: {_tag_problem(node.tag)}")
                continue
            if node.tag == MERGE_TAG:
                continue
            if getattr(node, "explicit_tag", False):
                problems.append(f"{where}: {_tag_problem(node.tag)}")
            elif node.style is None:
                problem = self.plain_problem(node)
                if problem:
                    problems.append(f"{where}: {problem}")
        return problems

    def plain_problem(self, node: yaml.ScalarNode) -> str | None:
        """Why an unquoted scalar means different things to different readers, or None."""
        text = node.value
        readings = {
            PYYAML: _pyyaml(self, node),
            GO_YAML_V3: go_yaml(text),
            GO_YAML_V2: go_yaml(text, v2=True),
            YAML_12: yaml12(text),
        }
        first = readings[PYYAML]
        if all(_same(first, r) for r in readings.values()):
            return None
        if first[0] == "unreadable":
            return f'unquoted {text} cannot be read ({first[1]}); write it in quotes ("{text}")'
        groups: dict[str, list[str]] = {}
        for reader, reading in readings.items():
            groups.setdefault(_shown(reading), []).append(reader)
        meanings = " but ".join(f"{meaning} to {', '.join(readers)}" for meaning, readers in groups.items())
        return f"unquoted {text} is {meanings}; {_fix(text, readings)}"

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG:
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
            raise UnreadableValue(
                None,
                None,
                f"a number of {len(str(node.value))} digits, far beyond what any key takes;"
                " write the value the key needs",
                node.start_mark,
            ) from None


class UnreadableValue(yaml.constructor.ConstructorError):
    """Valid YAML holding a value Python cannot read."""


StackLoader.add_constructor("tag:yaml.org,2002:int", StackLoader.construct_yaml_int)


def load_yaml(path: Path) -> Any:
    """A stack file's content; ConfigError naming the file (and the line, column or key) when it
    cannot be read or would mean different things to its readers."""
    with path.open("rb") as handle:
        data = handle.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(
            str(path),
            [
                f"it holds {path.stat().st_size} bytes, more than the {MAX_FILE_BYTES} a lab's stack needs;"
                " keep the keys the lab and your other programs read"
            ],
        )
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
        return yaml.load(text, Loader=StackLoader)
    except StackFileProblems as err:
        raise ConfigError(str(path), err.problems) from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = " ".join(str(err.problem or err.context or "unreadable").split())
        fix = "" if ";" in problem else "; fix the file at that position"
        kind = "" if isinstance(err, UnreadableValue) else "not valid YAML: "
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
