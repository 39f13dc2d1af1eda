"""The apt sources the kubeadm and nvidia roles add, written by Ansible's own deb822_repository with
the roles' arguments and read back by Debian's apt and gpg; and the machines that already have a
source of those repositories, as the install guides of Kubernetes and NVIDIA write one.

The role's reader of the machine's sources (library/apt_sources_of.py) is called directly on each
form a source takes, beside apt reading the same files; the plays run the roles for real. They
read and write /etc/apt, so they run in a private mount namespace with a temporary directory bound
over it, and the machine's apt is never touched (root, as CI). The repository keys cannot be
fetched here: a key made for the test stands in for each, served on loopback, so what is checked is
the form of the source and of its key, not NVIDIA's or Kubernetes' signatures (docs/validation.md).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

from lab.config import load_stack
from lab.paths import ANSIBLE_DIR
from tests.support.gpg import USER_ID, Key, gnupg_home
from tests.support.local_play import run_play
from tests.support.network import serving
from tests.support.shipped import shipped_stacks

sys.path.insert(0, str(ANSIBLE_DIR / "roles" / "apt_signed_source" / "library"))
from apt_sources_of import sources_of

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
KUBEADM_STACK, GPU_STACK = "example-kubeadm", "example-gpu"
# What the install guides write, each with its own keyring: NVIDIA's
# (docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html) and the
# kubeadm guide's (kubernetes.io/docs/setup/production-environment/tools/kubeadm/install-kubeadm/),
# for the Kubernetes minor of KUBEADM_STACK.
NVIDIA_GUIDE_LIST = (
    "deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] "
    "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) /\n"
)


def kubeadm_guide_list(minor: int) -> str:
    return (
        "deb [signed-by=/etc/apt/keyrings/kubernetes-apt-keyring.gpg] "
        f"https://pkgs.k8s.io/core:/stable:/v1.{minor}/deb/ /\n"
    )


KUBEADM_MINOR = load_stack(KUBEADM_STACK).kubernetes_minor
GUIDES = {
    KUBEADM: ("sources.list.d/kubernetes.list", kubeadm_guide_list(KUBEADM_MINOR)),
    NVIDIA: ("sources.list.d/nvidia-container-toolkit.list", NVIDIA_GUIDE_LIST),
}
STACK_OF = {KUBEADM: KUBEADM_STACK, NVIDIA: GPU_STACK}
# Per repository, the lab's source file of a first run: its name and text.
LabSources = dict[tuple[str, ...], tuple[str, str]]


def _why_not() -> str:
    if os.geteuid() != 0:
        return "needs root for a private mount namespace over /etc/apt; CI runs as root"
    done = subprocess.run([SYSTEM_PYTHON, "-c", "import debian.deb822"], capture_output=True)
    if done.returncode != 0:
        return "python3-debian is missing (scripts/apt-packages.txt)"
    return ""


@dataclass(frozen=True)
class Published:
    path: Path  # Release.key, in a folder of its own to serve
    fingerprint: str


@pytest.fixture(scope="module")
def key(signing_key: Key, tmp_path_factory: pytest.TempPathFactory) -> Published:
    """The test key as a file, as the repositories publish theirs."""
    if why := _why_not():
        pytest.skip(why)
    path = tmp_path_factory.mktemp("key") / "Release.key"
    path.write_text(signing_key.armored)
    return Published(path, signing_key.fingerprint)


def _task(role: str, tasks: str) -> dict[str, Any]:
    """The role's task that adds its repository through apt_signed_source, with its variables."""
    found = yaml.safe_load((ROLES / role / "tasks" / tasks).read_text())
    (task,) = [
        t for t in found if t.get("ansible.builtin.include_role", {}).get("name") == "apt_signed_source"
    ]
    return {key: task[key] for key in ("name", "ansible.builtin.include_role", "vars")}


def _etc_apt(work: Path, machine: dict[str, str | Path]) -> Path:
    """A private /etc/apt holding the files in `machine` (paths under /etc/apt -> text, or a file a
    symlink there points to)."""
    etc_apt = work / "etc-apt"
    for directory in ("sources.list.d", "keyrings"):
        (etc_apt / directory).mkdir(parents=True, exist_ok=True)
    for name, content in machine.items():
        if isinstance(content, Path):
            (etc_apt / name).symlink_to(content)
        else:
            (etc_apt / name).write_text(content)
    return etc_apt


def _run_repository_task(
    work: Path,
    stack: str,
    role: str,
    tasks: str,
    key_variable: str,
    fingerprint_variable: str,
    key: Published,
    machine: dict[str, str | Path] | None = None,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The role's repository task run for real for `stack` over `_etc_apt(work, machine)`; that
    directory, as the role left it, and ansible-playbook's result."""
    etc_apt = _etc_apt(work, machine or {})
    play = yaml.safe_dump([{"name": "Add the role's repository", "hosts": "all", "gather_facts": False,
                            "vars_files": [str(ROLES / role / "defaults" / "main.yml")],
                            "tasks": [_task(role, tasks)]}], sort_keys=False)  # fmt: skip
    inventory = {
        "all": {
            "hosts": {"node": {"ansible_connection": "local", "ansible_python_interpreter": SYSTEM_PYTHON}}
        }
    }
    variables = {
        "lab_kubernetes_minor": load_stack(stack).kubernetes_minor,
        # The test key stands in for the publisher's, so its fingerprint stands in for the pin.
        fingerprint_variable: key.fingerprint,
    }
    bind = f"mount --bind {etc_apt} /etc/apt"
    prefix = ["unshare", "--mount", "--propagation", "private", "sh", "-c", f'{bind} && exec "$@"', "sh"]
    # The role fetches the key with ansible.builtin.uri, which speaks HTTP, not file://.
    with serving(key.path.parent) as url:
        variables[key_variable] = f"{url}/{key.path.name}"
        environment = {"ANSIBLE_ROLES_PATH": str(ROLES)}
        done = run_play(work / "run", play, inventory, variables, environment=environment, prefix=prefix)
    return etc_apt, done


def _add_repository(*arguments: Any, **keywords: Any) -> Path:
    """`_run_repository_task`, which must succeed; the private /etc/apt as the role left it."""
    etc_apt, done = _run_repository_task(*arguments, **keywords)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return etc_apt


def apt_reads(etc_apt: Path, work: Path) -> subprocess.CompletedProcess[str]:
    """apt-get update --print-uris over the sources in `etc_apt` alone: apt parses every source,
    fetches nothing."""
    (work / "lists" / "partial").mkdir(parents=True, exist_ok=True)
    source_list = etc_apt / "sources.list"
    options = [f"Dir::Etc::SourceList={source_list if source_list.exists() else os.devnull}",
               f"Dir::Etc::SourceParts={etc_apt / 'sources.list.d'}",
               f"Dir::State::Lists={work / 'lists'}", f"Dir::Cache={work / 'cache'}"]  # fmt: skip
    argv = ["apt-get", "--print-uris", *(a for o in options for a in ("-o", o)), "update"]
    return subprocess.run(argv, capture_output=True, text=True)


def _apt_reads_them_all(etc_apt: Path, work: Path) -> str:
    """What apt would fetch for the sources in `etc_apt`, once it has read them all without an error."""
    read = apt_reads(etc_apt, work)
    assert read.returncode == 0 and "E:" not in read.stderr, read.stderr
    return read.stdout


def _labs(etc_apt: Path) -> list[str]:
    return sorted(p.name for p in (etc_apt / "sources.list.d").glob("k8scifar-*"))


@pytest.fixture(scope="module")
def lab_sources(key: Published, tmp_path_factory: pytest.TempPathFactory) -> LabSources:
    """Per repository, the lab's source file (name, text) as the role's first run on a machine
    without one writes it: the tests that start from an earlier run's source read this one run's."""
    found = {}
    for repository in (KUBEADM, NVIDIA):
        first = _add_repository(tmp_path_factory.mktemp("first"), STACK_OF[repository], *repository, key)
        (lab,) = _labs(first)
        found[repository] = (lab, (first / "sources.list.d" / lab).read_text())
    return found


@pytest.mark.parametrize(
    ("stack", "role", "tasks", "key_variable", "fingerprint_variable"),
    REPOSITORIES,
    ids=[f"{r[0]}-{r[1]}" for r in REPOSITORIES],
)
def test_the_roles_sources_are_what_apt_reads(
    stack: str,
    role: str,
    tasks: str,
    key_variable: str,
    fingerprint_variable: str,
    key: Published,
    tmp_path: Path,
) -> None:
    etc_apt = _add_repository(tmp_path, stack, role, tasks, key_variable, fingerprint_variable, key)
    # The lab's own file name, which no install guide or other tool writes.
    (source,) = (etc_apt / "sources.list.d").glob("*.sources")
    assert source.name.startswith("k8scifar-"), source.name
    stanza = dict(re.findall(r"^([\w-]+): (.*)$", source.read_text(), flags=re.MULTILINE))
    # sources.list(5): a suite ending in "/" is a flat repository and takes no Components.
    assert stanza["Suites"] == "/" and "Components" not in stanza
    # sources.list(5), Signed-By: the key itself, embedded as an indented field whose empty lines
    # are written " ." (apt_signed_source puts it there, so removing the source removes the key).
    assert not any((etc_apt / "keyrings").iterdir()), "the key travels inside the source, not a keyring"
    embedded = re.search(r"^Signed-By:\n((?: .*\n)+)", source.read_text(), flags=re.MULTILINE)
    assert embedded, source.read_text()
    armored = "\n".join(
        "" if line.strip() == "." else line.strip() for line in embedded.group(1).splitlines()
    )
    (tmp_path / "embedded.asc").write_text(armored + "\n")
    with gnupg_home(tmp_path / "gnupg") as home:
        shown = subprocess.run(
            ["gpg", "--homedir", str(home), "--show-keys", str(tmp_path / "embedded.asc")],
            capture_output=True,
            text=True,
        )
    assert shown.returncode == 0 and USER_ID in shown.stdout
    fetched = _apt_reads_them_all(etc_apt, tmp_path)
    assert stanza["URIs"].replace("$(ARCH)", "") in fetched.replace("amd64", "").replace("arm64", "")


@pytest.mark.parametrize("repository", [KUBEADM, NVIDIA], ids=["kubeadm", "nvidia"])
def test_apt_refuses_a_second_source_with_another_keyring(
    repository: tuple[str, ...], key: Published, tmp_path: Path
) -> None:
    """Why the machine's source is used as it is: two Signed-By for one repository stop every apt
    command (the lab's source is written here first, then the install guide's beside it)."""
    etc_apt = _add_repository(tmp_path, STACK_OF[repository], *repository, key)
    name, text = GUIDES[repository]
    (etc_apt / name).write_text(text)
    read = apt_reads(etc_apt, tmp_path)
    assert read.returncode != 0 and "Conflicting values set for option Signed-By" in read.stderr


DEB822_KUBEADM = (
    "Types: deb\n"
    f"URIs: https://pkgs.k8s.io/core:/stable:/v1.{KUBEADM_MINOR}/deb/\n"
    "Suites: /\nSigned-By: /etc/apt/keyrings/kubernetes-apt-keyring.gpg\n"
)
# A file of that name with a keyring path is the machine's; the lab's of an earlier release had the
# key inline.
MACHINE_SOURCES = [
    (KUBEADM, {GUIDES[KUBEADM][0]: GUIDES[KUBEADM][1]}),
    (KUBEADM, {"sources.list.d/kubernetes.sources": DEB822_KUBEADM}),
    (NVIDIA, {GUIDES[NVIDIA][0]: GUIDES[NVIDIA][1]}),
    (NVIDIA, {"sources.list": "deb http://deb.debian.org/debian bookworm main\n" + NVIDIA_GUIDE_LIST}),
    (NVIDIA, {GUIDES[NVIDIA][0]: Path("guide.list")}),  # a symlink, which apt follows
    # `#` inside [options] starts no comment; a file apt does not read may hold anything.
    (
        KUBEADM,
        {
            "sources.list.d/k.list": GUIDES[KUBEADM][1].replace("kubernetes-apt", "k#"),
            "sources.list.d/k~.list": "deb [arch=amd64]\n",
        },
    ),
]


def test_a_source_the_machine_has_is_used_as_it_is(key: Published, tmp_path: Path) -> None:
    """The reader's answer as the role acts on it: the install guide's source stays, the lab adds none."""
    name, text = GUIDES[KUBEADM]
    etc_apt = _add_repository(tmp_path, KUBEADM_STACK, *KUBEADM, key, {name: text})
    assert _labs(etc_apt) == [] and (etc_apt / name).read_text() == text
    _apt_reads_them_all(etc_apt, tmp_path)


@pytest.mark.parametrize("repository", [KUBEADM, NVIDIA], ids=["kubeadm", "nvidia"])
def test_the_lab_s_source_goes_when_the_machine_has_gained_its_own(
    repository: tuple[str, ...], key: Published, lab_sources: LabSources, tmp_path: Path
) -> None:
    """A lab source from an earlier run, then the install guide followed by hand: the next run
    leaves the machine's source alone and removes the lab's, so apt works again."""
    lab, source = lab_sources[repository]
    name, text = GUIDES[repository]
    machine = {f"sources.list.d/{lab}": source, name: text}
    etc_apt = _add_repository(tmp_path, STACK_OF[repository], *repository, key, machine)
    assert _labs(etc_apt) == [] and (etc_apt / name).read_text() == text
    _apt_reads_them_all(etc_apt, tmp_path)


# Another minor's repository is another source, also where one minor's name begins the other's
# (1.29 and 1.299).
LONGER_MINOR = KUBEADM_MINOR * 10 + KUBEADM_MINOR % 10
NOT_SOURCES = [
    (KUBEADM, {"sources.list.d/kubernetes.list": "# " + GUIDES[KUBEADM][1]}),
    (KUBEADM, {"sources.list.d/kubernetes.list.save": GUIDES[KUBEADM][1]}),  # apt reads no *.save
    (KUBEADM, {"sources.list.d/kubernetes.list": kubeadm_guide_list(LONGER_MINOR)}),
    (NVIDIA, {"sources.list.d/nvidia.list.distUpgrade": NVIDIA_GUIDE_LIST}),
    (KUBEADM, {"sources.list.d/kubernetes.sources": "Enabled: false\n" + DEB822_KUBEADM}),  # apt skips it
    (KUBEADM, {"sources.list.d/kubernetes~.list": GUIDES[KUBEADM][1]}),  # a name apt does not read
]


def _render(text: str, variables: dict[str, Any]) -> str:
    """`text` as Ansible templates it, following variables that name other variables."""
    while "{{" in text:
        text = jinja2.Template(text).render(variables)
    return text


def _reader_arguments(repository: tuple[str, ...], etc_apt: Path) -> dict[str, Any]:
    """What found.yml hands the reader when the role includes apt_signed_source, for `etc_apt`."""
    role, tasks, *_ = repository
    variables: dict[str, Any] = {"lab_kubernetes_minor": KUBEADM_MINOR}
    for defaults in (
        ROLES / role / "defaults" / "main.yml",
        ROLES / "apt_signed_source" / "defaults" / "main.yml",
    ):
        variables |= yaml.safe_load(defaults.read_text())
    variables |= _task(role, tasks)["vars"]
    found = yaml.safe_load((ROLES / "apt_signed_source" / "tasks" / "found.yml").read_text())
    (arguments,) = [task["apt_sources_of"] for task in found if "apt_sources_of" in task]
    return {
        **{name: _render(value, variables) for name, value in arguments.items()},
        "sources_list": etc_apt / "sources.list",
        "sources_dir": etc_apt / "sources.list.d",
    }


def _in_tmp(machine: dict[str, str | Path], tmp_path: Path) -> dict[str, str | Path]:
    """`machine` with each symlink's target made in `tmp_path`."""
    (tmp_path / "guide.list").write_text(NVIDIA_GUIDE_LIST)
    return {name: tmp_path / c if isinstance(c, Path) else c for name, c in machine.items()}


READS = [(*case, True) for case in MACHINE_SOURCES] + [(*case, False) for case in NOT_SOURCES]


@pytest.mark.parametrize(
    ("repository", "machine", "theirs"),
    READS,
    ids=[
        "kubeadm-guide",
        "kubeadm-deb822",
        "nvidia-guide",
        "nvidia-in-sources.list",
        "nvidia-symlink",
        "kubeadm-hash-in-options",
        "kubeadm-commented",
        "kubeadm-backup",
        "kubeadm-other-minor",
        "nvidia-upgrade-leftover",
        "kubeadm-disabled",
        "kubeadm-editor-backup",
    ],
)
def test_the_reader_finds_the_machine_s_source_where_apt_does(
    repository: tuple[str, ...], machine: dict[str, str | Path], theirs: bool, tmp_path: Path
) -> None:
    """The reader takes a file for a source of the repository exactly when apt, reading the same
    files, would fetch from that repository."""
    etc_apt = _etc_apt(tmp_path, _in_tmp(machine, tmp_path))
    arguments = _reader_arguments(repository, etc_apt)
    found = sources_of(**arguments)
    assert (bool(found["machine"]), found["binary"], found["earlier"]) == (theirs, theirs, []), found
    assert (arguments["match"] in _apt_reads_them_all(etc_apt, tmp_path)) == theirs


def test_the_reader_leaves_out_the_lab_s_files_and_sees_source_packages(
    signing_key: Key, tmp_path: Path
) -> None:
    """The lab's own file is never the machine's; the lab's file of an earlier release (the key
    inline) is told apart; a source of source packages only is the machine's but offers none."""
    inline = "".join(f" {line or '.'}\n" for line in signing_key.armored.splitlines())
    lab = DEB822_KUBEADM.replace("Signed-By: /etc/apt/keyrings/kubernetes-apt-keyring.gpg\n", "Signed-By:\n")
    name, text = GUIDES[KUBEADM]
    arguments = _reader_arguments(KUBEADM, _etc_apt(tmp_path, {}))
    own, earlier = (f"sources.list.d/{arguments[n]}" for n in ("own", "earlier"))
    etc_apt = _etc_apt(tmp_path, {own: lab + inline, earlier: lab + inline})
    assert sources_of(**arguments) == {"machine": [], "binary": False, "earlier": [str(etc_apt / earlier)]}
    (etc_apt / name).write_text(text.replace("deb ", "deb-src ", 1))
    assert sources_of(**arguments) == {
        "machine": [str(etc_apt / name)],
        "binary": False,
        "earlier": [str(etc_apt / earlier)],
    }


@pytest.mark.parametrize("repository", [KUBEADM, NVIDIA], ids=["kubeadm", "nvidia"])
def test_reset_removes_the_lab_s_source_and_leaves_the_machine_s(
    repository: tuple[str, ...], key: Published, lab_sources: LabSources, tmp_path: Path
) -> None:
    role, _, *variables = repository
    lab, source = lab_sources[repository]
    name, text = GUIDES[repository]
    machine = {f"sources.list.d/{lab}": source, name: text}
    etc_apt = _add_repository(tmp_path, STACK_OF[repository], role, "reset.yml", *variables, key, machine)
    assert _labs(etc_apt) == [] and (etc_apt / name).read_text() == text


@pytest.mark.parametrize("repository", [KUBEADM, NVIDIA], ids=["kubeadm", "nvidia"])
def test_a_second_run_keeps_the_lab_s_own_source(
    repository: tuple[str, ...], key: Published, lab_sources: LabSources, tmp_path: Path
) -> None:
    """The lab's file is never taken for the machine's (which would drop it every other run)."""
    lab, text = lab_sources[repository]
    etc_apt = _add_repository(
        tmp_path, STACK_OF[repository], *repository, key, {f"sources.list.d/{lab}": text}
    )
    assert _labs(etc_apt) == [lab] and (etc_apt / "sources.list.d" / lab).read_text() == text


@pytest.mark.parametrize("tasks", ["packages.yml", "reset.yml"])
def test_the_source_an_earlier_release_wrote_is_the_lab_s(
    tasks: str, key: Published, lab_sources: LabSources, tmp_path: Path
) -> None:
    """Earlier releases named the lab's file after the repository alone (kubernetes.sources), with
    the key inline: install replaces it with the lab's file of today, and reset removes it."""
    lab, source = lab_sources[KUBEADM]
    earlier = {"sources.list.d/kubernetes.sources": source}
    etc_apt = _add_repository(tmp_path, KUBEADM_STACK, "kubeadm", tasks, *KUBEADM[2:], key, earlier)
    assert sorted(p.name for p in (etc_apt / "sources.list.d").iterdir()) == (
        [lab] if tasks == "packages.yml" else []
    )


def test_a_source_for_source_packages_only_stops_the_play_naming_it(key: Published, tmp_path: Path) -> None:
    """apt refuses a second Signed-By beside a deb-src entry too, and a deb-src entry installs nothing."""
    name, text = GUIDES[KUBEADM]
    etc_apt, done = _run_repository_task(
        tmp_path, KUBEADM_STACK, *KUBEADM, key, {name: text.replace("deb ", "deb-src ", 1)}
    )
    assert done.returncode != 0
    assert (
        f"{name.split('/')[-1]} names pkgs.k8s.io/core:/stable:/v1.{KUBEADM_MINOR}/deb for source packages"
        in done.stdout
    )
    assert _labs(etc_apt) == []


def test_the_reader_loads_without_ansible() -> None:
    """Importing ansible.module_utils.basic patches sys.intern for the whole process, which torch's
    compiler then refuses: the reader the tests import must not bring it in."""
    probe = (
        "import sys; import apt_sources_of; "
        "sys.exit(sorted(m for m in sys.modules if m.split('.')[0] == 'ansible') or None)"
    )
    library = ROLES / "apt_signed_source" / "library"
    done = subprocess.run([sys.executable, "-c", probe], env={**os.environ, "PYTHONPATH": str(library)})
    assert done.returncode == 0
