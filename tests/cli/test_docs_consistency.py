"""The operator's docs point at files that exist and at `labctl` options that exist."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from lab.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
OPERATOR_PAGES = (
    "architecture",
    "quickstart",
    "troubleshooting",
    "scaling",
    "security",
    "reproducibility",
    "observability",
)
OPERATOR_DOCS = ["README.md"] + [f"docs/{name}.md" for name in (*OPERATOR_PAGES, "hosts", "validation")]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
COMMAND = re.compile(r"labctl (\w+)([^`\n]*)")


def broken_links(doc: Path) -> list[str]:
    """Relative links in `doc` whose target does not exist."""
    targets = (m[1] for m in LINK.finditer(doc.read_text()) if "://" not in m[1])
    return [t for t in targets if not (doc.parent / t).exists()]


def unknown_options(text: str, parser: argparse.ArgumentParser) -> list[str]:
    """`labctl COMMAND --option` mentions whose command or option the CLI does not have."""
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    problems = []
    for command, rest in COMMAND.findall(text):
        if command not in commands:
            problems.append(f"labctl {command}")
            continue
        known = {opt for action in commands[command]._actions for opt in action.option_strings}
        problems += [
            f"labctl {command} {opt}"
            for opt in re.findall(r"(?<!\w)--[a-z][-a-z]*", rest)
            if opt not in known
        ]
    return problems


def test_operator_docs_link_to_files_that_exist() -> None:
    for name in OPERATOR_DOCS:
        assert broken_links(ROOT / name) == [], name


def test_operator_docs_name_real_commands_and_options() -> None:
    parser = build_parser()
    for name in OPERATOR_DOCS:
        assert unknown_options((ROOT / name).read_text(), parser) == [], name


def test_the_checks_catch_broken_docs(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("See [the guide](guide.md), [web](https://example.org) and [here](doc.md#top).\n")
    assert broken_links(doc) == ["guide.md"]
    text = "run `labctl doctor --stack lab --fast` then `labctl deploy` and `labctl results --fetch x`"
    assert unknown_options(text, build_parser()) == ["labctl doctor --fast", "labctl deploy"]
