"""The testbed's names, addresses and apt proxy configuration, checked without creating anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.config import load_stack
from lab.testbed import aptproxy
from lab.testbed.layout import Layout


def test_machines_get_consecutive_addresses_and_short_link_names() -> None:
    layout = Layout("lab", 3, "10.77.0.0/24")
    assert layout.gateway == "10.77.0.1"
    assert [m.address for m in layout.machines] == ["10.77.0.11", "10.77.0.12", "10.77.0.13"]
    assert len({m.netns for m in layout.machines}) == 3
    # Linux refuses interface names over 15 characters; the veth peer adds one more.
    assert all(len(m.host_link) + 1 <= 15 for m in layout.machines)
    assert len(layout.bridge) <= 15


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "too-long-name"}, "1 to 6 letters or digits"),
        ({"count": 0}, "between 1 and 9"),
        ({"subnet": "8.8.8.0/24"}, "private IPv4"),
        ({"subnet": "10.77.0.0/29"}, "/24 or larger"),
    ],
)
def test_bad_layout_is_refused_with_the_reason(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Layout(**kwargs)  # type: ignore[arg-type]


def test_testbed_stack_matches_the_default_layout() -> None:
    """stacks/Pulumi.testbed.yaml must name the machines `up` creates, or nothing would connect."""
    lab = load_stack("testbed")
    layout = Layout()
    assert [(n.name, n.address) for n in lab.nodes] == [(m.name, m.address) for m in layout.machines]
    assert Path(lab.ssh.key_path) == layout.key
    assert {n.user for n in lab.nodes} == {"lab"}
    assert set(lab.skip) == {"kubernetesInstall", "nfsServerStart"}


@pytest.mark.parametrize(
    "sources",
    [
        "deb http://mirror.example/debian bookworm main\n",
        "deb [signed-by=/k.gpg] http://mirror.example/debian/ bookworm main\n",
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\n",
    ],
)
def test_host_mirror_is_read_from_either_sources_format(tmp_path: Path, sources: str) -> None:
    other = tmp_path / "nodesource.sources"
    other.write_text("Types: deb\nURIs: https://deb.nodesource.com/node_20.x\n")
    debian = tmp_path / "debian.sources"
    debian.write_text(sources)
    assert aptproxy.host_mirror([tmp_path / "absent", other, debian]) == "http://mirror.example/debian"


def test_proxy_backend_is_the_host_mirror_not_the_package_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(aptproxy, "CACHE_ROOT", tmp_path / "cache")
    layout = Layout("t1")
    monkeypatch.setattr(Layout, "state", property(lambda self: tmp_path / "state"))
    conf = aptproxy.write_config(layout, "http://mirror.example/debian")
    assert (conf / "backends_debian").read_text() == "http://mirror.example/debian/\n"
    acng = (conf / "acng.conf").read_text()
    assert f"BindAddress: {layout.gateway}\n" in acng
    assert "http://mirror.example/debian-security" in acng
