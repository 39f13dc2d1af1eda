"""tests/ mirrors the code, as the table in tests/README.md maps it, and helpers live only in
tests/support: no module of the suite imports a test module or a conftest."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "tests" / "README.md"
SUPPORT = "tests.support"
ROW = re.compile(r"^\| `(tests/[^`]*)` \| [^|]+ \|(.*)\|$", re.MULTILINE)


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(tree: ast.Module, module: str, is_package: bool) -> list[str]:
    """Every module `tree` imports (relative imports resolved), and every plugin it registers."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = module.split(".")
                base = package[: len(package) - node.level + (1 if is_package else 0)]
                names.append(".".join([*base, *([node.module] if node.module else [])]))
            elif node.module:
                names.append(node.module)
        elif isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "pytest_plugins" for target in node.targets
        ):
            names += [c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)]
    return names


def imports_outside_support(root: Path) -> list[str]:
    """`FILE: MODULE` for each import of a `tests.` module outside tests/support, under root/tests."""
    found = []
    for path in sorted((root / "tests").rglob("*.py")):
        module = _module_name(path, root)
        tree = ast.parse(path.read_text(), str(path))
        for name in _imported(tree, module, path.name == "__init__.py"):
            if (name == "tests" or name.startswith("tests.")) and not (
                name == SUPPORT or name.startswith(SUPPORT + ".")
            ):
                found.append(f"{path.relative_to(root)}: {name}")
    return found


def mapped_folders(text: str) -> dict[str, list[str]]:
    """The README table's folders, each with the code paths its row names."""
    return {
        folder: re.findall(r"`([^`]+)`", code) for folder, code in ROW.findall(text) if folder.endswith("/")
    }


def test_no_module_imports_a_test_module_or_a_conftest() -> None:
    assert imports_outside_support(ROOT) == []


def test_the_check_sees_a_planted_import(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    (tests / "support").mkdir(parents=True)
    (tests / "cli").mkdir()
    (tests / "support" / "labctl.py").write_text("import subprocess\n")
    (tests / "cli" / "conftest.py").write_text("import pytest\n")
    (tests / "cli" / "test_ok.py").write_text("from tests.support.labctl import labctl\n")
    (tests / "cli" / "test_bad.py").write_text(
        "from tests.cli.conftest import labctl\nfrom . import test_ok\nimport tests.cli.test_ok\n"
    )
    (tests / "conftest.py").write_text('pytest_plugins = ["tests.support.labctl", "tests.cli.conftest"]\n')
    assert imports_outside_support(tmp_path) == [
        "tests/cli/test_bad.py: tests.cli.conftest",
        "tests/cli/test_bad.py: tests.cli",
        "tests/cli/test_bad.py: tests.cli.test_ok",
        "tests/conftest.py: tests.cli.conftest",
    ]


def test_support_holds_helpers_only() -> None:
    support = ROOT / "tests" / "support"
    assert sorted(str(p.relative_to(ROOT)) for p in support.rglob("test_*.py")) == []
    assert sorted(str(p.relative_to(ROOT)) for p in support.rglob("conftest.py")) == []


def test_every_test_folder_maps_to_a_part_that_exists() -> None:
    rows = mapped_folders(README.read_text())
    folders = {
        f"tests/{path.parent.relative_to(ROOT / 'tests').parts[0]}/"
        for path in (ROOT / "tests").rglob("*.py")
        if path.parent != ROOT / "tests" and path.parent.relative_to(ROOT / "tests").parts[0] != "support"
    }
    assert sorted(folders - rows.keys()) == [], "add a row for each to the table in tests/README.md"
    assert sorted(rows.keys() - folders) == [], "a row of tests/README.md names no folder of tests"
    missing = [
        f"{folder} {code}" for folder, codes in rows.items() for code in codes if not (ROOT / code).exists()
    ]
    assert missing == []
    assert all(rows.values()), "each row names the code its folder tests"


def test_every_test_file_at_the_top_is_named_with_what_it_checks() -> None:
    text = README.read_text()
    top = sorted(p.name for p in (ROOT / "tests").glob("test_*.py"))
    assert [name for name in top if f"| `tests/{name}` |" not in text] == []
