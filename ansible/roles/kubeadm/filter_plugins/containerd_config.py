"""Filter `kubeadm_containerd_edit`: containerd's own default configuration, set up for kubeadm.

containerd prints its defaults with `containerd config default`; their keys moved between
releases (1.6/1.7: `sandbox_image`, the CNI section's `bin_dir`, double quotes; 2.x: `sandbox`
under pinned_images, `bin_dirs`, single quotes), so each setting is matched in every spelling the
supported releases print, and a default that has none of them stops the play instead of leaving
containerd half configured. Only the values are replaced: the rest of the text stays as
containerd wrote it.
"""

from __future__ import annotations

import re


class ContainerdConfigError(ValueError):
    """A containerd default this filter cannot set up; Ansible fails the task with the message.

    Not AnsibleFilterError: importing `ansible` patches `sys.intern` for the whole interpreter, which
    breaks PyTorch's compiler in a process that also imports this module (the daemon-file tests).
    """


# Where flannel (install-cni-plugin) and pkgs.k8s.io's kubernetes-cni put the CNI plugins;
# Debian patches containerd's default to /usr/lib/cni.
CNI_BIN_DIR = "/opt/cni/bin"
# The directory of the per-registry hosts.toml files (registry_mirror role).
CERTS_DIR = "/etc/containerd/certs.d"

_QUOTED = r"""(?:"[^"]*"|'[^']*')"""
_HEADER = re.compile(r"^[ \t]*\[[^\n]*\][ \t]*$", re.MULTILINE)
# The CRI plugin's CNI table: [plugins."io.containerd.grpc.v1.cri".cni] (1.x) or
# [plugins.'io.containerd.cri.v1.runtime'.cni] (2.x).
_CNI_TABLE = re.compile(r"\.cni\][ \t]*$")


def _sections(text: str) -> list[str]:
    """`text` cut before every table header; joined again they give `text` back."""
    starts = [0] + [m.start() for m in _HEADER.finditer(text) if m.start() > 0]
    return [text[a:b] for a, b in zip(starts, [*starts[1:], len(text)], strict=True)]


def _cni_plugin_dirs(section: str) -> str:
    """The CNI table with the plugin directory set; 2.x's `bin_dirs` wins over its empty `bin_dir`."""
    if re.search(r"^\s*bin_dirs = ", section, re.MULTILINE):
        return re.sub(r"(?m)^(\s*)bin_dirs = \[[^\]]*\]", rf'\1bin_dirs = ["{CNI_BIN_DIR}"]', section)
    return re.sub(rf"(?m)^(\s*)bin_dir = {_QUOTED}", rf'\1bin_dir = "{CNI_BIN_DIR}"', section)


def _toml(value: bool) -> str:
    return "true" if value else "false"


def _sandbox_image(images: list[str]) -> str:
    pauses = [image.strip() for image in images if "/pause:" in image]
    if len(pauses) != 1:
        raise ContainerdConfigError(f"`kubeadm config images list` named no single pause image: {images}")
    return pauses[0]


def kubeadm_containerd_edit(
    default: str,
    images: list[str],
    systemd_cgroup: bool = True,
    restrict_oom_score_adj: bool = False,
    sandbox_image: str = "",
) -> str:
    """`default` (containerd's `config default`) with systemd cgroups, kubeadm's pause image (from
    `images`, the lines of `kubeadm config images list`), the CNI plugins in /opt/cni/bin and
    registry hosts read from certs.d.

    A machine's settings file (lab/machine_settings.py) may ask for cgroupfs (`systemd_cgroup`
    false, matching the kubelet's cgroupDriver) and for `restrict_oom_score_adj`, which keeps
    runc from lowering an OOM score below containerd's own where it lacks CAP_SYS_RESOURCE;
    otherwise both stay containerd's defaults but for systemd cgroups. It may also name the
    `sandbox_image` its images carry instead of kubeadm's pause."""
    sections = _sections(default)
    cni = [i for i, s in enumerate(sections) if _CNI_TABLE.search(s.splitlines()[0] if s else "")]
    if len(cni) != 1:
        raise ContainerdConfigError("containerd's default configuration has no single CRI CNI table")
    sections[cni[0]] = _cni_plugin_dirs(sections[cni[0]])
    text = "".join(sections)
    edits = [
        (
            "the cgroup driver",
            r"(?m)^(\s*)SystemdCgroup = false$",
            rf"\1SystemdCgroup = {_toml(systemd_cgroup)}",
        ),
        (
            "the OOM score restriction",
            r"(?m)^(\s*)restrict_oom_score_adj = false$",
            rf"\1restrict_oom_score_adj = {_toml(restrict_oom_score_adj)}",
        ),
        (
            "the sandbox image",
            rf"(?m)^(\s*)(sandbox_image|sandbox) = {_QUOTED}$",
            rf'\1\2 = "{sandbox_image or _sandbox_image(images)}"',
        ),
    ]
    for what, pattern, replacement in edits:
        text, found = re.subn(pattern, replacement, text)
        if not found:
            raise ContainerdConfigError(f"containerd's default configuration has no setting for {what}")
    # An empty registry hosts directory (1.x, and 2.x as Debian builds it) becomes certs.d;
    # upstream 2.x already names it.
    return re.sub(r"(?m)^(\s*)config_path = (''|\"\")$", rf'\1config_path = "{CERTS_DIR}"', text)


class FilterModule:
    """Ansible's entry point for the filters of this file."""

    def filters(self) -> dict:
        return {"kubeadm_containerd_edit": kubeadm_containerd_edit}
