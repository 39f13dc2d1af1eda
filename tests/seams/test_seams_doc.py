"""docs/seams.md names real tests, and every seam test here is in its table."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "seams.md"
TEST_PATH = re.compile(r"`(tests/[\w/]+\.py)`")


def named_tests(text: str) -> set[str]:
    return set(TEST_PATH.findall(text))


def missing_tests(text: str) -> list[str]:
    return sorted(p for p in named_tests(text) if not (ROOT / p).is_file())


def test_every_test_the_table_names_exists() -> None:
    assert missing_tests(DOC.read_text()) == []


def test_every_seam_test_has_its_row() -> None:
    here = {str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "seams").glob("test_*.py")}
    here.discard("tests/seams/test_seams_doc.py")
    assert sorted(here - named_tests(DOC.read_text())) == []


def test_the_check_sees_a_renamed_test() -> None:
    text = DOC.read_text().replace("tests/seams/test_host_ports.py", "tests/seams/test_ports.py")
    assert missing_tests(text) == ["tests/seams/test_ports.py"]
