"""The nvidia role's two settings in the NVIDIA container toolkit's config.toml, set by site.yml
and taken back by reset.yml, run for real by Ansible on copies of the file.

The file is the owner's: the toolkit's postinst writes it (`nvidia-ctk config --in-place`) and a
purge leaves it, so reset must give back exactly what the owner had, the lines the owner set for
the two keys and the postinst's commented examples alike, byte for byte.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.bootstrap.inventory import image_requirement_vars
from tests.support.host_files import TOOLKIT_CONFIG
from tests.support.local_play import run_tasks

# An owner who set both keys, in their own spelling, before the lab came.
OWNERS = TOOLKIT_CONFIG.replace(
    "#accept-nvidia-visible-devices-as-volume-mounts = false\n"
    "#accept-nvidia-visible-devices-envvar-when-unprivileged = true\n",
    "accept-nvidia-visible-devices-as-volume-mounts=false\n"
    "accept-nvidia-visible-devices-envvar-when-unprivileged = true # the owner's choice\n",
)


def _run(tmp_path: Path, tasks: str, config: Path, name: str) -> None:
    variables = {
        **image_requirement_vars(),
        "lab_state_dir": str(tmp_path / "state"),
        "nvidia_toolkit_config": str(config),
        "ansible_become": False,
    }
    done = run_tasks("nvidia", tasks, tmp_path / name, variables)
    assert done.returncode == 0, done.stdout[-3000:]


@pytest.mark.parametrize("before", [TOOLKIT_CONFIG, OWNERS], ids=["package-defaults", "owners-settings"])
def test_reset_gives_back_the_owners_configuration(tmp_path: Path, before: str) -> None:
    (tmp_path / "state").mkdir()
    config = tmp_path / "config.toml"
    config.write_text(before)

    _run(tmp_path, "toolkit_config.yml", config, "site")
    lab = config.read_text()
    assert "accept-nvidia-visible-devices-as-volume-mounts = true" in lab.splitlines()
    assert "accept-nvidia-visible-devices-envvar-when-unprivileged = false" in lab.splitlines()
    _run(tmp_path, "toolkit_config.yml", config, "site-again")  # a second site run changes nothing
    assert config.read_text() == lab

    _run(tmp_path, "toolkit_reset.yml", config, "reset")
    assert config.read_text() == before
