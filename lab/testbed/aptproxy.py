"""An apt-cacher-ng instance on the bridge, the machines' only way to Debian's packages.

It runs with its own configuration directory so the host's apt-cacher-ng (if any) is untouched,
and its Debian backend is the mirror the host's own apt uses: the package's default remaps to a
mirror that may not be reachable from here.
"""

from __future__ import annotations

import re
import socket
import subprocess
import time
from pathlib import Path

from lab.testbed.commands import TestbedError
from lab.testbed.layout import APT_PROXY_PORT, CACHE_ROOT, Layout

APT_SOURCES = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
FALLBACK_MIRROR = "http://deb.debian.org/debian"


def host_mirror(sources: list[Path] = APT_SOURCES) -> str:
    """The first Debian mirror named by the host's apt sources (one-line or deb822 format)."""
    pattern = re.compile(r"(?:^deb\s+(?:\[[^\]]*\]\s+)?|^URIs:\s*)(https?://\S+/debian)/?(?:\s|$)", re.M)
    for path in sources:
        if path.is_file():
            match = pattern.search(path.read_text(errors="replace"))
            if match:
                return match.group(1)
    return FALLBACK_MIRROR


def config_dir(layout: Layout) -> Path:
    return layout.state / "apt-cacher-ng"


def write_config(layout: Layout, mirror: str) -> Path:
    conf = config_dir(layout)
    (conf / "log").mkdir(parents=True, exist_ok=True)
    cache = CACHE_ROOT / "apt-cacher-ng"
    cache.mkdir(parents=True, exist_ok=True)
    (conf / "backends_debian").write_text(f"{mirror}/\n")
    security = mirror.rsplit("/", 1)[0] + "/debian-security"
    (conf / "acng.conf").write_text(
        f"CacheDir: {cache}\n"
        f"LogDir: {conf / 'log'}\n"
        "SupportDir: /usr/lib/apt-cacher-ng\n"
        f"BindAddress: {layout.gateway}\n"
        f"Port: {APT_PROXY_PORT}\n"
        "Remap-debrep: file:deb_mirror*.gz /debian ; file:backends_debian\n"
        f"Remap-secdeb: security.debian.org deb.debian.org/debian-security /debian-security ; {security}\n"
        "ExThreshold: 4\n"
    )
    return conf


def start(layout: Layout, mirror: str) -> subprocess.Popen[bytes]:
    """Start the proxy in the foreground of its own session and wait until it accepts connections."""
    conf = write_config(layout, mirror)
    log = (conf / "log" / "stdout.log").open("wb")
    proc = subprocess.Popen(
        ["apt-cacher-ng", "-c", str(conf), "ForeGround=1", f"PidFile={conf / 'pid'}"],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise TestbedError(f"apt-cacher-ng exited ({proc.returncode}); see {conf / 'log'}")
        try:
            socket.create_connection((layout.gateway, APT_PROXY_PORT), timeout=1).close()
            return proc
        except OSError:
            time.sleep(0.2)
    raise TestbedError(f"apt-cacher-ng did not listen on {layout.apt_proxy} within 15 s")
