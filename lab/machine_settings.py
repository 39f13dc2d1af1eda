"""The machine settings file: what a machine says of itself that the kubelet and containerd must
follow there, read by the prereq and kubeadm roles on the node (role machine_settings).

The local test machines (lab.testbed) are systemd-nspawn machines sharing their host's kernel,
cgroups and swap; a kubelet runs there only with the settings docs/kubelets.md found. They are
facts of the machine, not choices of a stack: lab.testbed writes this file into each machine's
own tree when it makes the machine, and no stack key reaches it. A user's node has no such file,
and the roles then change nothing. One module defines the file for both sides: the testbed
writes it with `render`, the role's filter (ansible/roles/machine_settings/filter_plugins) reads
it with `read`, so an unknown key or value fails the play in one line.
"""

from __future__ import annotations

from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

# Where the file lies on a machine; root's, as what it steers runs as root.
MACHINE_SETTINGS_FILE = "/etc/k8scifar/machine-settings.yaml"
HEADER = "# Settings of this machine for the K8sCIFAR lab's roles (lab/machine_settings.py).\n"


class _Keys(BaseModel):
    # The file's keys as written (camelCase, as the kubelet's own); an unknown one is an error.
    # Strict: a quoted "0" or "yes" is a typo in a file a program writes, not a number or a flag.
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, strict=True)


class KubeletSettings(_Keys):
    """KubeletConfiguration fields (kubelet.config.k8s.io/v1beta1) the machine needs set."""

    oom_score_adj: int | None = Field(default=None, alias="oomScoreAdj", ge=-1000, le=1000)
    max_open_files: int | None = Field(default=None, alias="maxOpenFiles", gt=0)
    protect_kernel_defaults: bool | None = Field(default=None, alias="protectKernelDefaults")
    fail_cgroup_v1: bool | None = Field(default=None, alias="failCgroupV1")


class ContainerdSettings(_Keys):
    """Settings of containerd's CRI plugin the machine needs."""

    restrict_oom_score_adj: bool | None = Field(default=None, alias="restrictOomScoreAdj")
    # Every pod's sandbox is containerd's `sandbox_image`, not the kubelet's choice; a machine
    # whose images carry a pause of their own names it here (an image reference).
    sandbox_image: str | None = Field(default=None, alias="sandboxImage", pattern=r"^[a-z0-9][a-z0-9./_:-]*$")


class KubeProxySettings(_Keys):
    """KubeProxyConfiguration fields (kubeproxy.config.k8s.io/v1alpha1) the machine needs set."""

    # 0 leaves the kernel's conntrack table size alone; kube-proxy otherwise writes
    # /proc/sys/net/netfilter/nf_conntrack_max and exits where it may not.
    conntrack_max_per_core: int | None = Field(default=None, alias="conntrackMaxPerCore", ge=0)


class MachineSettings(_Keys):
    """The whole file; every key optional, an absent one leaves the lab's default."""

    # One driver for both, as the kubelet and containerd must agree (kubelet cgroupDriver,
    # containerd runc's SystemdCgroup).
    cgroup_driver: Literal["systemd", "cgroupfs"] | None = Field(default=None, alias="cgroupDriver")
    # The machine's swap is its host's, which it may not turn off: swap stays on, the kubelet
    # runs with it (failSwapOn: false) and kubeadm's Swap preflight check is ignored.
    shared_swap: bool = Field(default=False, alias="sharedSwap")
    # The machine carries a pod network of its own (CNI configuration, routes between nodes):
    # the lab installs none (no flannel) and leaves it in place on reset.
    own_pod_network: bool = Field(default=False, alias="ownPodNetwork")
    kubelet: KubeletSettings = KubeletSettings()
    containerd: ContainerdSettings = ContainerdSettings()
    kube_proxy: KubeProxySettings = Field(default=KubeProxySettings(), alias="kubeProxy")

    def for_roles(self) -> dict[str, Any]:
        """What the roles apply: the kubelet's configuration patch, containerd's settings,
        kube-proxy's, whether swap stays on, whether the lab brings a pod network, and kubeadm's
        preflight checks to ignore."""
        kubelet = self.kubelet.model_dump(by_alias=True, exclude_none=True)
        if self.cgroup_driver is not None:
            kubelet["cgroupDriver"] = self.cgroup_driver
        if self.shared_swap:
            kubelet["failSwapOn"] = False
        kube_proxy = {}
        if self.kube_proxy.conntrack_max_per_core is not None:
            kube_proxy["conntrack"] = {"maxPerCore": self.kube_proxy.conntrack_max_per_core}
        ignored = ["Swap"] if self.shared_swap else []
        if self.containerd.sandbox_image:
            # kubeadm's ImagePull check pulls its own pause (images.GetControlPlaneImages lists
            # GetPauseImage, whose tag no configuration sets), which offline it cannot. Offline,
            # the kubeadm role names the other images containerd lacks before `kubeadm init`.
            ignored.append("ImagePull")
        return {
            "kubelet": kubelet,
            "systemd_cgroup": self.cgroup_driver != "cgroupfs",
            "restrict_oom_score_adj": bool(self.containerd.restrict_oom_score_adj),
            "sandbox_image": self.containerd.sandbox_image or "",
            "kube_proxy": kube_proxy,
            "own_pod_network": self.own_pod_network,
            "shared_swap": self.shared_swap,
            "ignore_preflight_errors": ignored,
        }


def render(settings: MachineSettings) -> str:
    """The file's text for `settings`, as the testbed writes it."""
    data = settings.model_dump(by_alias=True, exclude_none=True, exclude_defaults=True)
    return HEADER + yaml.safe_dump(data)


def read(text: str) -> MachineSettings:
    """The settings in the file's `text`; ValueError with one line naming the first wrong key."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        problem = err.__class__.__name__
        raise ValueError(f"{MACHINE_SETTINGS_FILE} is not YAML ({problem}); write it with render()") from None
    try:
        return MachineSettings.model_validate(data or {})
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the file"
        why = "is no key of the file" if first["type"] == "extra_forbidden" else first["msg"].lower()
        keys = ", ".join(_known_keys(MachineSettings))
        raise ValueError(
            f"{MACHINE_SETTINGS_FILE}: {where} {why} (found {first.get('input')!r}); it takes {keys}"
        ) from None


def _known_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        key = prefix + (field.alias or name)
        inner = field.annotation
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            keys += _known_keys(inner, key + ".")
        else:
            keys.append(key)
    return keys
