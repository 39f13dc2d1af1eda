"""The apt sources the kubeadm and nvidia roles add, written by Ansible's own deb822_repository with
the roles' arguments and read back by Debian's apt and gpg.

The module writes to /etc/apt/sources.list.d and /etc/apt/keyrings; it runs in a private mount
namespace with temporary directories bound over both, so the machine's apt is never touched (root,
as CI). The repository keys cannot be fetched here: a key made for the test stands in for each,
served from a file:// URL, so what is checked is the form of the source and of the keyring file,
not NVIDIA's or Kubernetes' signatures (docs/validation.md).
"""

from __future__ import annotations

import http.server
import os
import re
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from lab.config import load_stack
from lab.playbook import ANSIBLE_DIR
from tests.hosts.local_play import run_play
from tests.shipped import shipped_stacks

ROLES = ANSIBLE_DIR / "roles"
# Each role's repository (added through apt_signed_source), and the variables that hold its key's
# URL and pinned fingerprint.
KUBEADM = ("kubeadm", "packages.yml", "kubeadm_repo_key_url", "kubeadm_repo_key_fingerprint")
NVIDIA = ("nvidia", "main.yml", "nvidia_repo_key_url", "nvidia_repo_key_fingerprint")
# Every stack's repositories: kubeadm's follows the stack's Kubernetes minor release.
REPOSITORIES = [
    (stack, *repository)
    for stack in shipped_stacks()
    for repository, used in (
        (KUBEADM, load_stack(stack).distribution.value == "kubeadm"),
        (NVIDIA, load_stack(stack).has_gpus),
    )
    if used
]
SYSTEM_PYTHON = "/usr/bin/python3"  # deb822_repository needs python3-debian, which Debian packages for it
# What NVIDIA's install guide writes
# (docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html).
NVIDIA_GUIDE_LIST = (
    "deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] "
    "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) /\n"
)


def _why_not() -> str:
    if os.geteuid() != 0:
        return "needs root for a private mount namespace over /etc/apt; CI runs as root"
    done = subprocess.run([SYSTEM_PYTHON, "-c", "import debian.deb822"], capture_output=True)
    if done.returncode != 0:
        return "python3-debian is missing (scripts/apt-packages.txt)"
    return ""


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An armored public key, as the repositories publish theirs."""
    if why := _why_not():
        pytest.skip(why)
    home = tmp_path_factory.mktemp("gnupg")
    env = {**os.environ, "GNUPGHOME": str(home)}
    gpg = ["gpg", "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]
    subprocess.run([*gpg, "--quick-gen-key", "k8scifar test <test@invalid>", "ed25519", "sign", "1d"],
                   env=env, check=True, capture_output=True)  # fmt: skip
    exported = subprocess.run([*gpg, "--armor", "--export"], env=env, check=True, capture_output=True)
    (home / "Release.key").write_bytes(exported.stdout)
    return home / "Release.key"


def _fingerprint(key: Path) -> str:
    shown = subprocess.run(["gpg", "--with-colons", "--show-keys", str(key)], capture_output=True, text=True)
    return next(line.split(":")[9] for line in shown.stdout.splitlines() if line.startswith("fpr:"))


def _task(role: str, tasks: str) -> dict[str, Any]:
    """The role's task that adds its repository through apt_signed_source, with its variables."""
    found = yaml.safe_load((ROLES / role / "tasks" / tasks).read_text())
    (task,) = [
        t for t in found if t.get("ansible.builtin.include_role", {}).get("name") == "apt_signed_source"
    ]
    return {key: task[key] for key in ("name", "ansible.builtin.include_role", "vars")}


@contextmanager
def _published(key: Path) -> Iterator[str]:
    """The key's URL on a web server on loopback, as its publisher serves it (the role fetches it
    with ansible.builtin.uri, which speaks HTTP, not file://)."""
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(key.parent))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/{key.name}"
    finally:
        server.shutdown()
        server.server_close()


def _add_repository(
    work: Path, stack: str, role: str, tasks: str, key_variable: str, fingerprint_variable: str, key: Path
) -> tuple[Path, Path]:
    """The role's repository task run for real for `stack`; the directories it wrote sources and keys to."""
    sources, keyrings = work / "sources.list.d", work / "keyrings"
    sources.mkdir(parents=True)
    keyrings.mkdir()
    play = yaml.safe_dump([{"name": "Add the role's repository", "hosts": "all", "gather_facts": False,
                            "vars_files": [str(ROLES / role / "defaults" / "main.yml")],
                            "tasks": [_task(role, tasks)]}], sort_keys=False)  # fmt: skip
    binds = f"mount --bind {sources} /etc/apt/sources.list.d && mount --bind {keyrings} /etc/apt/keyrings"
    inventory = {
        "all": {
            "hosts": {"node": {"ansible_connection": "local", "ansible_python_interpreter": SYSTEM_PYTHON}}
        }
    }
    variables = {
        "lab_kubernetes_minor": load_stack(stack).kubernetes_minor,
        # The test key stands in for the publisher's, so its fingerprint stands in for the pin.
        fingerprint_variable: _fingerprint(key),
    }
    prefix = ["unshare", "--mount", "--propagation", "private", "sh", "-c", f'{binds} && exec "$@"', "sh"]
    with _published(key) as key_url:
        variables[key_variable] = key_url
        done = run_play(
            work, play, inventory, variables, environment={"ANSIBLE_ROLES_PATH": str(ROLES)}, prefix=prefix
        )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return sources, keyrings


def apt_reads(sources: Path, work: Path) -> subprocess.CompletedProcess[str]:
    """apt-get update --print-uris over `sources` alone: apt parses every source, fetches nothing."""
    (work / "lists" / "partial").mkdir(parents=True, exist_ok=True)
    options = [f"Dir::Etc::SourceList={os.devnull}", f"Dir::Etc::SourceParts={sources}",
               f"Dir::State::Lists={work / 'lists'}", f"Dir::Cache={work / 'cache'}"]  # fmt: skip
    argv = ["apt-get", "--print-uris", *(a for o in options for a in ("-o", o)), "update"]
    return subprocess.run(argv, capture_output=True, text=True)


@pytest.mark.parametrize(
    ("stack", "role", "tasks", "key_variable", "fingerprint_variable"),
    REPOSITORIES,
    ids=[f"{r[0]}-{r[1]}" for r in REPOSITORIES],
)
def test_the_roles_sources_are_what_apt_reads(
    stack: str, role: str, tasks: str, key_variable: str, fingerprint_variable: str, key: Path, tmp_path: Path
) -> None:
    sources, keyrings = _add_repository(tmp_path, stack, role, tasks, key_variable, fingerprint_variable, key)
    (source,) = sources.glob("*.sources")
    stanza = dict(re.findall(r"^([\w-]+): (.*)$", source.read_text(), flags=re.MULTILINE))
    # sources.list(5): a suite ending in "/" is a flat repository and takes no Components.
    assert stanza["Suites"] == "/" and "Components" not in stanza
    # sources.list(5), Signed-By: the key itself, embedded as an indented field whose empty lines
    # are written " ." (apt_signed_source puts it there, so removing the source removes the key).
    assert not any(keyrings.iterdir()), "the key travels inside the source, not in a keyring file"
    embedded = re.search(r"^Signed-By:\n((?: .*\n)+)", source.read_text(), flags=re.MULTILINE)
    assert embedded, source.read_text()
    armored = "\n".join(
        "" if line.strip() == "." else line.strip() for line in embedded.group(1).splitlines()
    )
    (tmp_path / "embedded.asc").write_text(armored + "\n")
    shown = subprocess.run(
        ["gpg", "--show-keys", str(tmp_path / "embedded.asc")], capture_output=True, text=True
    )
    assert shown.returncode == 0 and "k8scifar test" in shown.stdout
    read = apt_reads(sources, tmp_path)
    assert read.returncode == 0 and "E:" not in read.stderr, read.stderr
    assert stanza["URIs"].replace("$(ARCH)", "") in read.stdout.replace("amd64", "").replace("arm64", "")


def test_apt_refuses_a_second_source_with_another_keyring(key: Path, tmp_path: Path) -> None:
    """Why the nvidia role keeps the machine's source: two Signed-By for one URL stop every apt command."""
    sources, _ = _add_repository(tmp_path, "example-gpu", *NVIDIA, key)
    (sources / "nvidia-container-toolkit.list").write_text(NVIDIA_GUIDE_LIST)
    read = apt_reads(sources, tmp_path)
    assert read.returncode != 0 and "Conflicting values set for option Signed-By" in read.stderr
