"""Everything one stack says about the lab, and the facts derived from it that the rest reads."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, StringConstraints, field_validator

from lab.config.batch import chosen_note, global_batch
from lab.config.facts import (
    DERIVED_NAMESPACE_ROLES,
    DERIVED_NAMESPACE_SUFFIXES,
    DNS_LABEL_MAX,
    KNOWN_PATCHES,
    KUEUE_MIN_K8S_MINOR,
    KUEUE_NAMESPACE,
    RESERVED_NAMESPACE_PREFIX,
    RESERVED_NAMESPACES,
    RUNS_FOLDER,
)
from lab.config.keys import DnsLabel, KeyModel
from lab.config.machines import Airgap, Distribution, Nfs, Node, Registry, Role, SkipStep, Ssh
from lab.config.provides import Provides
from lab.config.workload import Backend, GangScheduler, Observability, Placement, Scheduling, Sweep, Trainer
from lab.config.world import World, capacity, plan


class LabConfig(KeyModel):
    """Everything one stack says about the lab."""

    distribution: Distribution = Field(default=Distribution.K3S, description="`k3s` or `kubeadm`.")
    kubernetes_version: str = Field(
        default="1.34.4", description="Kubernetes release MAJOR.MINOR.PATCH (1.25 to 1.37)."
    )
    nodes: list[Node] = Field(min_length=1, description="The machines; exactly one is `server`.")
    ssh: Ssh = Field(default_factory=Ssh)
    nfs: Nfs = Field(default_factory=Nfs)
    registry: Registry = Field(default_factory=Registry)
    airgap: Airgap | None = Field(default=None, description="Install Kubernetes from local files.")
    namespace: DnsLabel = Field(
        default="k8scifar",
        description="Namespace of every lab object; not default, kube-system, kube-public,"
        " kube-node-lease, another kube-* one or kueue-system, not ending in one of the suffixes below"
        " (nor making a reserved name with them); at most"
        f" {DNS_LABEL_MAX - max(map(len, DERIVED_NAMESPACE_SUFFIXES))} characters, as the lab's"
        f" {' and '.join(f'<namespace>{x}' for x in DERIVED_NAMESPACE_SUFFIXES)} are DNS labels too.",
    )
    trainer: Trainer = Field(default_factory=Trainer)
    sweep: Sweep | None = Field(default=None, description="Optional hyperparameter sweep.")
    scheduling: Scheduling = Field(default_factory=Scheduling)
    observability: Observability = Field(default_factory=Observability)
    kubeconfig: str | None = Field(
        default=None,
        description="A cluster that is already there: the path of its kubeconfig (`~` allowed). The"
        " program then declares the lab's objects through it and touches no host (no SSH, no"
        " Ansible); the nodes' names, roles and GPUs must be the cluster's, and `address` only"
        " names the registry's endpoint on the server.",
    )
    kubeconfig_context: str | None = Field(
        default=None,
        description="The context of `kubeconfig` that names the lab's cluster; needed when the file"
        " names several (the file's own `current-context` does not choose: any `kubectl config"
        " use-context` changes it).",
    )
    allow_kubeconfig_commands: bool = Field(
        default=False,
        description="Let a kubeconfig's `exec` plugin or `auth-provider` run its command on this"
        " machine (`labctl` and `pulumi up` refuse such a kubeconfig otherwise): only for a"
        " kubeconfig you trust, such as your cloud's login plugin.",
    )
    provides: Provides = Field(
        default_factory=Provides,
        description="What the cluster already has, which the lab then neither declares nor installs"
        " (on a cluster the stack names by `kubeconfig` or on machines the lab bootstraps).",
    )
    skip: dict[SkipStep, Annotated[str, StringConstraints(min_length=1)]] = Field(
        default_factory=dict,
        description="Steps to leave out, each mapped to the reason printed when it is skipped"
        " (for test machines that cannot run them, never for a real lab).",
    )

    @field_validator("kubernetes_version", mode="before")
    @classmethod
    def _version_is_text(cls, value: Any) -> Any:
        # Unquoted, YAML reads 1.30 as the number 1.3: what was written is gone by here.
        if isinstance(value, int | float) and not isinstance(value, bool):
            raise ValueError(
                f"is a number ({value!r} once YAML read it), not a release: write the release in"
                ' quotes with its patch, such as "1.34.4"'
            )
        return value

    @field_validator("kubernetes_version")
    @classmethod
    def _version(cls, value: str) -> str:
        # Numbers as Kubernetes writes them: no leading zeros, so one release has one spelling.
        match = re.fullmatch(r"v?1\.(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})", value)
        if not match:
            raise ValueError(f"{value!r} is not a release such as 1.34.4 (numbers without leading zeros)")
        minor, patch = int(match.group(1)), int(match.group(2))
        if minor not in KNOWN_PATCHES:
            raise ValueError(
                f"{value!r} is outside the supported 1.{min(KNOWN_PATCHES)} to 1.{max(KNOWN_PATCHES)}"
            )
        if patch > KNOWN_PATCHES[minor]:
            raise ValueError(
                f"{value!r} is not a release the lab knows: the newest 1.{minor} patch it knows is"
                f" 1.{minor}.{KNOWN_PATCHES[minor]}; use that, or, once Kubernetes has released"
                f" 1.{minor}.{patch} (https://kubernetes.io/releases/), raise KNOWN_PATCHES in"
                " lab/config/facts.py"
            )
        return value.removeprefix("v")

    @field_validator("kubeconfig")
    @classmethod
    def _kubeconfig_file(cls, value: str | None) -> str | None:
        if value is not None and not Path(value).expanduser().is_file():
            raise ValueError(f"{value!r} is not a file; name the kubeconfig of the cluster to declare into")
        return value

    @field_validator("namespace")
    @classmethod
    def _room_for_derived(cls, value: str) -> str:
        longest = max(DERIVED_NAMESPACE_SUFFIXES, key=len)
        if len(value) + len(longest) > DNS_LABEL_MAX:
            raise ValueError(
                f"{value!r} has {len(value)} characters: the lab's {value}{longest} namespace would"
                f" exceed {DNS_LABEL_MAX}; use at most {DNS_LABEL_MAX - len(longest)}"
            )
        return value

    @field_validator("namespace")
    @classmethod
    def _not_taken(cls, value: str) -> str:
        """The lab's namespace and those named after it (`<namespace>-build`, ...) are none that
        Kubernetes or what the lab installs already uses, and the lab's namespace does not look
        like one named after another (a lab moved from `k8scifar` to `k8scifar-gpu` would declare
        the namespace its GPU plugin still holds)."""
        fix = "use a name of the lab's own such as k8scifar"
        suffix = next((s for s in DERIVED_NAMESPACE_SUFFIXES if value.endswith(s)), None)
        if suffix is not None:
            raise ValueError(
                f"{value!r} ends in {suffix}, which the lab adds to its namespace for its"
                f" {DERIVED_NAMESPACE_ROLES[suffix]}; {fix}"
            )
        for suffix in ("", *DERIVED_NAMESPACE_SUFFIXES):
            name = value + suffix
            if name in RESERVED_NAMESPACES or name.startswith(RESERVED_NAMESPACE_PREFIX):
                owner = "Kubernetes reserves for itself"
            elif name == KUEUE_NAMESPACE:
                owner = "Kueue installs into"
            else:
                continue
            what = (
                f"{value!r} is"
                if not suffix
                else f"{value!r} makes {name}, for its {DERIVED_NAMESPACE_ROLES[suffix]},"
            )
            raise ValueError(f"{what} a namespace {owner}; {fix}")
        return value

    # Derived facts the rest of the lab reads instead of recomputing.

    @property
    def server(self) -> Node:
        return next(n for n in self.nodes if n.role is Role.SERVER)

    @property
    def agents(self) -> list[Node]:
        return [n for n in self.nodes if n.role is Role.AGENT]

    @property
    def nfs_server(self) -> Node:
        name = self.nfs.server or self.server.name
        return next(n for n in self.nodes if n.name == name)

    @property
    def nfs_allowed_networks(self) -> list[str]:
        if self.nfs.allowed_networks is not None:
            return self.nfs.allowed_networks
        return [str(ipaddress.ip_network(n.address)) for n in self.nodes]

    @property
    def exports_nfs(self) -> bool:
        """Whether the lab's volumes are its own NFS export: not where the cluster provides one."""
        return self.provides.volume is None

    @property
    def runs_folder(self) -> tuple[Node, str] | None:
        """(the node, the folder there) that holds the run folders, read over SSH; None where no
        node of the lab's own holds it (a cluster's machines, a StorageClass's volumes)."""
        if not self.bootstraps_hosts:
            return None
        if self.provides.volume is None:
            return self.nfs_server, f"{self.nfs.export_path}/{RUNS_FOLDER}"
        if self.provides.volume.shared_folder is not None:
            return self.server, f"{self.provides.volume.shared_folder}/{RUNS_FOLDER}"
        return None

    @property
    def installs_monitoring(self) -> bool:
        """Whether the lab installs its Prometheus and Grafana: where it watches the ranks and the
        cluster has no monitoring of its own."""
        return self.observability.enabled and self.provides.monitoring is None

    @property
    def kubernetes_minor(self) -> int:
        """The minor of the Kubernetes release (34 for 1.34.4): what fields and packages depend on."""
        return int(self.kubernetes_version.split(".")[1])

    @property
    def gang_scheduler(self) -> GangScheduler:
        """As configured, else Kueue wherever the cluster is new enough for it."""
        if self.scheduling.gang is not None:
            return self.scheduling.gang
        return GangScheduler.KUEUE if self.kubernetes_minor >= KUEUE_MIN_K8S_MINOR else GangScheduler.NONE

    @property
    def gpu_nodes(self) -> list[Node]:
        return [n for n in self.nodes if n.gpus > 0]

    @property
    def has_gpus(self) -> bool:
        return bool(self.gpu_nodes)

    @property
    def total_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    @property
    def registry_endpoint(self) -> str:
        """host:port every node's container runtime pulls the trainer image from."""
        return f"{self.server.address}:{self.registry.port}"

    @property
    def bootstraps_hosts(self) -> bool:
        """False when the stack names a cluster's kubeconfig: no host is touched then."""
        return self.kubeconfig is None

    @property
    def installs_kubernetes(self) -> bool:
        """False on machines that skip the Kubernetes install: there is no cluster to declare into."""
        return SkipStep.KUBERNETES_INSTALL not in self.skip

    @property
    def packs_by_topology(self) -> bool:
        """Whether Kueue's topology-aware scheduling packs the ranks' pods (lab.config.world)."""
        return (
            self.trainer.placement is Placement.PACK
            and self.has_gpus
            and self.gang_scheduler is GangScheduler.KUEUE
        )

    @property
    def world(self) -> World:
        """The training run's ranks and pods: as configured, else as many ranks as the placement allows."""
        pack = self.trainer.placement is Placement.PACK
        return plan([n.gpus for n in self.nodes], pack, self.packs_by_topology, self.trainer.replicas)

    @property
    def replicas(self) -> int:
        """Ranks of the training run (the world size)."""
        return self.world.ranks

    @property
    def batch_set_by_stack(self) -> bool:
        return "batch_size" in self.trainer.model_fields_set

    @property
    def batch_size(self) -> int:
        """The global batch the run trains with: the stack's, else the default or the nearest that
        splits evenly over the ranks (lab.config.batch)."""
        return global_batch(self.trainer.batch_size, self.batch_set_by_stack, self.replicas)

    @property
    def batch_note(self) -> str | None:
        """The sentence that says the lab chose the batch, when it did."""
        return chosen_note(self.trainer.batch_size, self.batch_set_by_stack, self.replicas)

    @property
    def max_replicas(self) -> int:
        """Ranks the lab can place: a rank needs a whole GPU on GPU labs (lab.config.world)."""
        pack = self.trainer.placement is Placement.PACK
        return capacity([n.gpus for n in self.nodes], pack, self.packs_by_topology)

    @property
    def backend(self) -> str:
        if self.trainer.backend is Backend.AUTO:
            return Backend.NCCL.value if self.has_gpus else Backend.GLOO.value
        return self.trainer.backend.value

    @property
    def sweep_parallelism(self) -> int:
        limit = self.total_gpus if self.has_gpus else len(self.nodes)
        return min(self.sweep.parallelism or limit, limit) if self.sweep else 0
