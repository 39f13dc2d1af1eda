"""The repository's Markdown names files and modules that exist.

A doc that names `lab/cluster/pods.py` or `lab.cluster.gang` sends its reader there; a rename that
forgets the doc leaves them at nothing. Every path in backticks or as a relative link target whose
first part is a top-level entry of the checkout must exist, and every dotted `lab.` or `trainer.`
name in backticks must be a module, or a name a module binds. Paths of other projects (upstream
citations, `/etc/...` on the nodes) begin with no entry of this checkout and are left alone.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from lab.config.workload import Trainer
from tests.support.shipped import ROOT, tracked

FENCE = re.compile(r"^ *(```|~~~).*?^ *\1", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
DOTTED = re.compile(r"(?:lab|trainer)(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
# What may follow a path or module: a line (`:12`), a name in it (`:NAME`), an anchor (`#part`).
SUFFIX = re.compile(r"[:#].*$")
# Punctuation around a name inside one code span: what opens a list or a quote, and what closes
# one or a sentence.
OPENING = "([\"'"
CLOSING = ",;:.)]\"'"
# A placeholder names no file; a pattern with `*` must match one at least.
PLACEHOLDER = re.compile(r"[<>{}$]")
# The stack file's `trainer:` keys read like modules of trainer/: `trainer.hostNetwork`.
TRAINER_KEYS = {f"trainer.{field.alias or name}" for name, field in Trainer.model_fields.items()}
# The stack file the docs' operator writes with `labctl init`: theirs, so git does not hold it.
OPERATOR_STACK = "stacks/Pulumi.lab.yaml"


def _names(text: str) -> tuple[list[str], list[str]]:
    """The words of `text`'s code spans and its link targets, fenced code blocks left out."""
    prose = FENCE.sub("", text)
    words = [w.lstrip(OPENING).rstrip(CLOSING) for s in CODE_SPAN.finditer(prose) for w in s[2].split()]
    targets = (m[1] for m in LINK.finditer(prose))
    links = [t for t in targets if "://" not in t and not t.startswith(("#", "mailto:"))]
    return [w for w in words if w], links


def _bound(module: Path) -> set[str]:
    """The names a module binds at its top level: definitions, assignments, imports."""
    names: set[str] = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _module_file(root: Path, parts: list[str]) -> Path | None:
    base = root.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def missing_module(root: Path, name: str) -> bool:
    """Whether `name` is neither a module of `root` nor a module followed by a name it binds (its
    attributes after that, such as a class's method, are not followed)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        module = _module_file(root, parts[:end])
        if module is not None:
            return end < len(parts) and parts[end] not in _bound(module)
    return True


def _repository_path(name: str, top: set[str]) -> bool:
    """Whether `name` is a path of this repository's: it begins with one of its top-level entries
    `top`, and is neither a placeholder nor the operator's stack."""
    return (
        "/" in name and name.split("/")[0] in top and not PLACEHOLDER.search(name) and name != OPERATOR_STACK
    )


def _present(root: Path, path: str) -> bool:
    return any(root.glob(path)) if "*" in path else (root / path).exists()


def missing(root: Path, doc: Path, top: set[str]) -> list[str]:
    """The paths and modules `doc` names that `root` does not have; `top`: the checkout's top-level
    entries, where a path of this repository begins."""
    words, links = _names(doc.read_text())
    found = []
    for word in words:
        bare = SUFFIX.sub("", word)
        if DOTTED.fullmatch(bare):
            gone = bare not in TRAINER_KEYS and missing_module(root, bare)
        else:
            gone = _repository_path(bare, top) and not _present(root, bare)
        if gone:
            found.append(word)
    for link in links:
        target = (doc.parent / SUFFIX.sub("", link)).resolve()
        if not target.is_relative_to(root.resolve()) or not target.exists():
            found.append(link)
    return found


def test_every_path_and_module_the_docs_name_exists() -> None:
    top = {path.relative_to(ROOT).parts[0] for path in tracked()}
    problems = {
        str(doc.relative_to(ROOT)): names for doc in tracked("*.md") if (names := missing(ROOT, doc, top))
    }
    assert problems == {}


def test_the_check_sees_a_planted_miss(tmp_path: Path) -> None:
    (tmp_path / "lab" / "part").mkdir(parents=True)
    (tmp_path / "lab" / "part" / "__init__.py").write_text("from lab.part.thing import made\n")
    (tmp_path / "lab" / "part" / "thing.py").write_text("def made() -> None: ...\n")
    (tmp_path / "docs").mkdir()
    doc = tmp_path / "docs" / "page.md"
    doc.write_text(
        "Kept: `lab/part/thing.py:made`, `lab/part/`, `lab/*/thing.py`, `lab.part.thing.made`,\n"
        "`lab.part.made`, `trainer.hostNetwork: true`, `stacks/Pulumi.lab.yaml`,\n"
        "[thing](../lab/part/thing.py#made), `/etc/hosts`, `internal/pkg/dcgmprovider/dcgm.go`.\n"
        "`stacks/Pulumi.<stack>.yaml`.\n"
        "Gone: `lab/part/gone.py`, `lab.part.gone`, `lab.part.thing.unmade`, `lab/*/gone.py`,\n"
        "`stacks/Pulumi.example.yaml`,\n"
        "[page](other.md), and in a fence nothing:\n"
        "```\n`lab/part/fenced.py`\n```\n"
    )
    assert missing(tmp_path, doc, {"docs", "lab", "stacks"}) == [
        "lab/part/gone.py",
        "lab.part.gone",
        "lab.part.thing.unmade",
        "lab/*/gone.py",
        "stacks/Pulumi.example.yaml",
        "other.md",
    ]
