"""A cached tree is built once, found again by its key, and never found half-built."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.testbed import tree_cache


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tree_cache, "CACHE_ROOT", tmp_path / "cache")
    return tmp_path / "cache"


def test_a_tree_is_built_once_and_found_by_its_key(cache: Path) -> None:
    builds = []

    def build(folder: Path) -> None:
        builds.append(folder)
        folder.mkdir()
        (folder / "made").write_text("1")

    first = tree_cache.cached_tree("base", "a b", build)
    assert tree_cache.cached_tree("base", "a b", build) == first
    assert len(builds) == 1 and (first / "made").read_text() == "1"
    assert first.parent == cache and first.name.startswith("base-")
    assert tree_cache.cached_tree("base", "a c", build) != first, "another key is another tree"


def _interrupted(folder: Path) -> None:
    folder.mkdir()
    (folder / "half").write_text("")
    raise KeyboardInterrupt


def test_an_interrupted_build_is_never_found_and_starts_again_from_nothing(cache: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        tree_cache.cached_tree("tools", "k", _interrupted)
    assert [p.name.endswith(".building") for p in cache.iterdir()] == [True]

    def build(folder: Path) -> None:
        assert not folder.exists(), "the half-built tree is removed first"
        folder.mkdir()

    tree = tree_cache.cached_tree("tools", "k", build)
    assert sorted(p.name for p in cache.iterdir()) == [tree.name]
    assert list(tree.iterdir()) == []


def test_a_leftover_that_cannot_be_removed_stops_the_build(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build into a leftover folder would nest the new tree inside it (`cp -a base building`)."""
    with pytest.raises(KeyboardInterrupt):
        tree_cache.cached_tree("tools", "k", _interrupted)

    def busy(path: Path) -> None:
        raise OSError(16, "Device or resource busy", str(path))

    def build(folder: Path) -> None:
        raise AssertionError("built into a leftover")

    monkeypatch.setattr(tree_cache.shutil, "rmtree", busy)
    with pytest.raises(OSError, match="busy"):
        tree_cache.cached_tree("tools", "k", build)
