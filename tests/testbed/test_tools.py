"""The upstream programs' cache: installed from the pinned tools folder, refused from any other."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lab.paths import ROOT
from lab.testbed import tools


def test_setup_installed_the_pinned_tools_and_status_says_so_in_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "lab.testbed.tools", "status"], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [f"tools: complete in {tools.install_dir()}"]
    for program in (
        "pulumi",
        "pulumi-language-python",
        "pulumi-resource-kubernetes",
        "kube-apiserver",
        "kwok",
    ):
        assert (tools.bin_dir() / program).exists(), program


def test_the_pin_is_the_stamp_install_sh_writes() -> None:
    """The cache's name and the pin come from the manifest's hash, taken as install.sh takes it."""
    assert tools.manifest_hash(tools.install_dir()) == tools.MANIFEST_SHA256
    assert (tools.install_dir() / tools.STAMP).read_text().strip() == tools.MANIFEST_SHA256


def test_a_complete_cache_needs_no_tools_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(tools.SOURCE_VARIABLE, str(tmp_path / "nowhere"))
    assert tools.install() == tools.install_dir()


def _cache_elsewhere(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(tools.CACHE_VARIABLE, str(tmp_path / "cache"))


def test_no_tools_folder_is_one_line_saying_how_to_get_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _cache_elsewhere(monkeypatch, tmp_path)
    monkeypatch.setenv(tools.SOURCE_VARIABLE, str(tmp_path / "nowhere"))
    assert not tools.complete()
    with pytest.raises(tools.ToolsMissing) as caught:
        tools.install()
    message = str(caught.value)
    assert "\n" not in message
    assert str(tmp_path / "nowhere") in message and "build.sh" in message
    with pytest.raises(tools.ToolsMissing, match=r"run scripts/setup\.sh"):
        tools.bin_dir()


def test_a_tools_folder_of_other_versions_is_refused_before_installing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _cache_elsewhere(monkeypatch, tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    (other / "MANIFEST.tsv").write_text("bin/pulumi\tv3.0.0\n")
    ran = other / "ran"
    (other / "install.sh").write_text(f"touch {ran}\n")
    monkeypatch.setenv(tools.SOURCE_VARIABLE, str(other))
    with pytest.raises(tools.ToolsMissing, match="holds other versions"):
        tools.install()
    assert not ran.exists()
    assert not (tmp_path / "cache").exists()


def test_a_cache_whose_stamp_is_not_the_pin_is_not_complete(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _cache_elsewhere(monkeypatch, tmp_path)
    tools.install_dir().mkdir(parents=True)
    (tools.install_dir() / tools.STAMP).write_text("0" * 64 + "\n")
    assert not tools.complete()
    assert tools.status() == f"tools: not installed in {tools.install_dir()}; run scripts/setup.sh"
