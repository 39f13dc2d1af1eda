"""The trainer's build context and its content-hash tag, on copies of the real tree."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from lab.cluster.build_context import (
    CONTEXT_DIRS,
    DOCKERFILE,
    MAX_ARCHIVE_BYTES,
    ROOT,
    BuildContextError,
    build_context,
)


def _copy_tree(dest: Path) -> Path:
    for top in CONTEXT_DIRS:
        shutil.copytree(ROOT / top, dest / top, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    # The trainer tree may still be empty here; the hash must not care what is inside.
    (dest / "trainer" / "__init__.py").write_text('"""trainer"""\n')
    return dest


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return _copy_tree(tmp_path / "repo")


def test_the_same_tree_gives_the_same_tag_and_bytes(tree: Path, tmp_path: Path) -> None:
    other = _copy_tree(tmp_path / "other")
    # Timestamps and read permissions differ between checkouts; they must not reach the tag.
    for path in other.rglob("*"):
        os.utime(path, (1_000_000, 1_000_000))
        if path.is_file():
            path.chmod(0o600)
    first, second = build_context(tree), build_context(other)
    assert first.tag == second.tag
    assert first.archive == second.archive
    assert len(first.tag) == 12 and int(first.tag, 16) >= 0


def test_a_one_byte_change_in_trainer_gives_another_tag(tree: Path) -> None:
    before = build_context(tree).tag
    init = tree / "trainer" / "__init__.py"
    data = bytearray(init.read_bytes())
    data[0] ^= 1
    init.write_bytes(bytes(data))
    assert build_context(tree).tag != before


def test_a_new_file_or_an_executable_bit_gives_another_tag(tree: Path) -> None:
    before = build_context(tree).tag
    script = tree / "images" / "trainer" / "entrypoint.sh"
    script.write_text("#!/bin/sh\n")
    with_file = build_context(tree).tag
    script.chmod(0o755)
    assert len({before, with_file, build_context(tree).tag}) == 3


def test_byte_code_caches_are_left_out(tree: Path) -> None:
    before = build_context(tree)
    cache = tree / "trainer" / "__pycache__"
    cache.mkdir()
    (cache / "x.cpython-311.pyc").write_bytes(b"\0" * 16)
    (tree / "trainer" / "stray.pyc").write_bytes(b"\0")
    after = build_context(tree)
    assert after.tag == before.tag
    assert not any("__pycache__" in f or f.endswith(".pyc") for f in after.files)


def test_the_archive_is_sorted_and_normalised(tree: Path) -> None:
    context = build_context(tree)
    with tarfile.open(fileobj=io.BytesIO(context.archive), mode="r:gz") as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names) == list(context.files)
    assert {"images/trainer", "trainer", "trainer/__init__.py"} <= set(names)
    assert all(m.mtime == 0 and m.uid == 0 and m.gid == 0 and m.uname == "" for m in members)
    assert {m.mode for m in members if m.isfile()} <= {0o644, 0o755}


def test_a_context_over_the_configmap_limit_is_refused_by_name(tree: Path) -> None:
    # Random bytes do not compress: the archive must exceed the limit.
    (tree / "trainer" / "weights.bin").write_bytes(os.urandom(MAX_ARCHIVE_BYTES + 1))
    with pytest.raises(
        BuildContextError, match=r"over the 1048576-byte ConfigMap limit.*trainer/weights\.bin"
    ):
        build_context(tree)


def test_a_missing_directory_is_named(tmp_path: Path) -> None:
    (tmp_path / "trainer").mkdir()
    with pytest.raises(BuildContextError, match=r"images/trainer is missing"):
        build_context(tmp_path)


def test_a_symlink_is_refused(tree: Path) -> None:
    (tree / "trainer" / "link.py").symlink_to(tree / "trainer" / "__init__.py")
    with pytest.raises(BuildContextError, match=r"link\.py is not a regular file"):
        build_context(tree)


def test_busybox_tar_unpacks_the_context_as_the_build_job_does(tree: Path, tmp_path: Path) -> None:
    """The build Job's init container unpacks with the BuildKit image's busybox tar."""
    deep = tree / "trainer" / ("d" * 60) / ("f" * 80 + ".py")  # past ustar's 100-character name field
    deep.parent.mkdir()
    deep.write_text("x = 1\n")
    (tree / "images" / "trainer" / "entrypoint.sh").write_text("#!/bin/sh\n")
    (tree / "images" / "trainer" / "entrypoint.sh").chmod(0o755)
    context = build_context(tree)
    archive = tmp_path / "context.tar.gz"
    archive.write_bytes(context.archive)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    subprocess.run(
        ["busybox", "tar", "-xzf", str(archive), "-C", str(workspace)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    unpacked = sorted(p.relative_to(workspace).as_posix() for p in workspace.rglob("*") if p.is_file())
    shipped = [name for name in context.files if (tree / name).is_file()]
    assert unpacked == shipped
    for name in shipped:
        assert (workspace / name).read_bytes() == (tree / name).read_bytes(), name
    assert os.access(workspace / "images" / "trainer" / "entrypoint.sh", os.X_OK)


def test_the_base_image_is_the_dockerfiles_and_must_be_pinned_by_digest(tree: Path) -> None:
    """The build's recording step runs it with an API token: a base by tag alone stops the plan."""
    assert build_context(tree).base_image.startswith("python:3.11.")
    assert "@sha256:" in build_context(tree).base_image
    dockerfile = tree / DOCKERFILE
    text = dockerfile.read_text()
    dockerfile.write_text(re.sub(r"^(FROM \S+)@sha256:[0-9a-f]{64}", r"\1", text, flags=re.MULTILINE))
    with pytest.raises(BuildContextError, match=r"must start from a base image pinned by digest"):
        build_context(tree)
