"""The nvidia role's /dev/char links to the NVIDIA device nodes, run for real by Ansible on a copy of
/dev/char, with a stand-in `nvidia-ctk` that does what the toolkit's command does.

Containers lose their GPUs on `systemctl daemon-reload` where runc hands systemd its device rules
as /dev/char/MAJOR:MINOR paths and the NVIDIA device nodes have none. NVIDIA's workaround
(NVIDIA/nvidia-container-toolkit#48, "Workarounds"): `nvidia-ctk system create-dev-char-symlinks
--create-all`, now and from a udev rule whenever the driver binds. The command (toolkit v1.17.8,
cmd/nvidia-ctk/system/create-dev-char-symlinks) links every possible control and GPU node,
`os.Symlink(target, <dev-char-path>/MAJOR:MINOR)`, and only warns where a name exists already; the
majors are the driver's (/proc/devices: `nvidia` 195 and `nvidia-uvm` 238 on a host with driver
580.159.04 and one H200, as read on this project's GPU machine).

What a real node adds and is not tested here: the driver binding and udev running the rule, and
a systemd reload with a GPU container running (no GPU, no udev in these test machines).
"""

from __future__ import annotations

import os
from pathlib import Path

from lab.bootstrap.inventory import image_requirement_vars
from tests.support.local_play import run_tasks

# NVIDIA/nvidia-container-toolkit#48: "A simple udev rule to enforce this", to be installed as
# 71-nvidia-dev-char.rules, with the command's path as the lab installs it.
NVIDIA_RULE = (
    'ACTION=="add", DEVPATH=="/bus/pci/drivers/nvidia", '
    'RUN+="{ctk} system create-dev-char-symlinks --create-all"'
)
# What `--create-all` links on a one-GPU node: the control devices and GPU 0.
NODES = {
    "195:254": "/dev/nvidia-modeset",
    "195:255": "/dev/nvidiactl",
    "238:0": "/dev/nvidia-uvm",
    "238:1": "/dev/nvidia-uvm-tools",
    "195:0": "/dev/nvidia0",
}
CTK = """\
#!/bin/sh
# Stand-in for `nvidia-ctk system create-dev-char-symlinks --create-all --dev-char-path DIR`.
[ "$1 $2 $3" = "system create-dev-char-symlinks --create-all" ] || exit 2
[ "$4" = "--dev-char-path" ] || exit 2
mkdir -p "$5"
{links}
"""


def stand_in(folder: Path) -> Path:
    folder.mkdir()
    ctk = folder / "nvidia-ctk"
    links = "\n".join(
        f'echo "Creating link $5/{name} => {target}" >&2; ln -s {target} "$5/{name}" 2>/dev/null'
        f" || echo 'Could not create symlink: file exists' >&2"
        for name, target in NODES.items()
    )
    ctk.write_text(CTK.format(links=links) + "exit 0\n")
    ctk.chmod(0o755)
    return ctk


def listing(char: Path) -> dict[str, str]:
    return {p.name: os.readlink(p) for p in sorted(char.iterdir())}


def _run(tmp_path: Path, tasks: str, name: str, ctk: Path) -> str:
    variables = {
        **image_requirement_vars(),
        "lab_state_dir": str(tmp_path / "state"),
        "nvidia_ctk": str(ctk),
        "nvidia_dev_char_path": str(tmp_path / "char"),
        "nvidia_dev_char_rule": str(tmp_path / "rules.d" / "71-k8scifar-nvidia-dev-char.rules"),
        "ansible_become": False,
    }
    done = run_tasks("nvidia", tasks, tmp_path / name, variables)
    assert done.returncode == 0, done.stdout[-3000:]
    return done.stdout


def test_site_links_the_device_nodes_and_reset_takes_back_only_the_labs(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "rules.d").mkdir()
    char = tmp_path / "char"
    char.mkdir()
    # What the machine had: udev's own link, and one the driver made for nvidiactl.
    (char / "1:3").symlink_to("../null")
    (char / "195:255").symlink_to("../nvidiactl")
    before = listing(char)
    ctk = stand_in(tmp_path / "ctk")
    rule = tmp_path / "rules.d" / "71-k8scifar-nvidia-dev-char.rules"

    _run(tmp_path, "dev_char.yml", "site", ctk)
    assert NVIDIA_RULE.format(ctk=ctk) in rule.read_text().splitlines()
    made = {name: target for name, target in NODES.items() if name != "195:255"}
    assert listing(char) == {**before, **made}
    again = _run(tmp_path, "dev_char.yml", "site-again", ctk)  # a second site run changes nothing
    assert "changed=0" in again and listing(char) == {**before, **made}

    # Another tool put its own link in the place of one of the lab's since.
    (char / "238:1").unlink()
    (char / "238:1").symlink_to("../other-device")
    _run(tmp_path, "dev_char_reset.yml", "reset", ctk)
    assert not rule.exists()
    assert listing(char) == {**before, "238:1": "../other-device"}
    assert not (tmp_path / "state" / "nvidia-dev-char-links.json").exists()


def test_reset_without_a_record_removes_the_rule_and_no_link(tmp_path: Path) -> None:
    """A node the lab set up before the links existed: reset removes nothing it did not make."""
    (tmp_path / "state").mkdir()
    char = tmp_path / "char"
    char.mkdir()
    (char / "195:0").symlink_to("/dev/nvidia0")
    _run(tmp_path, "dev_char_reset.yml", "reset", stand_in(tmp_path / "ctk"))
    assert listing(char) == {"195:0": "/dev/nvidia0"}


def test_site_and_reset_run_the_dev_char_tasks() -> None:
    """The role's own entry points include them: site.yml's main and reset.yml's reset."""
    tasks = Path(__file__).resolve().parents[2] / "ansible" / "roles" / "nvidia" / "tasks"
    assert "include_tasks: dev_char.yml" in (tasks / "main.yml").read_text()
    assert "include_tasks: dev_char_reset.yml" in (tasks / "reset.yml").read_text()
