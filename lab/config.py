"""The lab's stack configuration: one typed, validated object built from the `k8scifar:*` keys.

Every other part of the lab (inventory, Ansible variables, Kubernetes objects, the CLI) reads
this object and nothing else, so a bad value is caught here, named by its key, before any host
is touched.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator
from pydantic.alias_generators import to_camel

PROJECT = "k8scifar"
STACKS_DIR = Path(__file__).resolve().parent.parent / "stacks"

# kubernetes-validate ships schemas for these minors; objects are validated against the configured one.
SUPPORTED_K8S_MINORS = range(25, 38)

DnsLabel = Annotated[
    str,
    StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63),
]
InterfaceName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:@-]{1,15}$")]


class ConfigError(ValueError):
    """A stack configuration that cannot build a lab. The message names every bad key and its fix."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"invalid lab configuration in {source}:\n{lines}")


class _Model(BaseModel):
    # camelCase keys in the stack file, snake_case in Python; unknown keys are errors so typos surface.
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class Distribution(StrEnum):
    K3S = "k3s"
    KUBEADM = "kubeadm"


class Role(StrEnum):
    SERVER = "server"
    AGENT = "agent"


class HostKeyPolicy(StrEnum):
    ACCEPT_NEW = "accept-new"  # trust on first contact, refuse a changed key
    STRICT = "strict"  # the key must already be in known_hosts
    OFF = "off"  # no checking: only for throw-away test machines


class Placement(StrEnum):
    SPREAD = "spread"  # one rank per node: required pod anti-affinity
    PACK = "pack"  # every rank on one node: required pod affinity


class Backend(StrEnum):
    AUTO = "auto"
    NCCL = "nccl"
    GLOO = "gloo"


class Compression(StrEnum):
    NONE = "none"
    FP16 = "fp16"
    BF16 = "bf16"
    POWERSGD = "powersgd"


class Model(StrEnum):
    AIRBENCH = "airbench"
    RESNET9 = "resnet9"


class SweepStrategy(StrEnum):
    GRID = "grid"
    RANDOM = "random"


class SkipStep(StrEnum):
    """Bootstrap steps a machine may be unable to run; each is skipped with its stated reason."""

    KUBERNETES_INSTALL = "kubernetesInstall"  # installing and starting k3s/kubeadm, node labels
    NFS_SERVER_START = "nfsServerStart"  # starting the kernel NFS server


class Node(_Model):
    """One machine of the lab, reachable over SSH."""

    name: DnsLabel = Field(description="Kubernetes node name and inventory host name (DNS label).")
    address: str = Field(description="IP address the other node and the operator reach it at.")
    user: str = Field(min_length=1, description="SSH user with passwordless sudo.")
    role: Role = Field(description="`server` (control plane, exactly one) or `agent`.")
    gpus: int = Field(default=0, ge=0, description="NVIDIA GPUs on this node; 0 for CPU only.")
    interface: InterfaceName | None = Field(
        default=None,
        description="Network interface for NCCL/Gloo traffic and flannel (default: the route's).",
    )

    @field_validator("address")
    @classmethod
    def _ip_address(cls, value: str) -> str:
        try:
            return str(ipaddress.ip_address(value))
        except ValueError:
            raise ValueError(f"{value!r} is not an IP address (write it as e.g. 192.168.1.10)") from None


class Ssh(_Model):
    """How Ansible reaches the nodes."""

    key_path: str = Field(default="~/.ssh/id_ed25519", description="Private key for every node.")
    port: int = Field(default=22, ge=1, le=65535, description="SSH port on every node.")
    host_key_policy: HostKeyPolicy = Field(
        default=HostKeyPolicy.ACCEPT_NEW,
        description="`accept-new` (default), `strict` (known_hosts only) or `off` (test machines).",
    )


class Nfs(_Model):
    """The shared export that holds the dataset, runs and the registry's storage."""

    server: DnsLabel | None = Field(default=None, description="Node that exports (default: the server).")
    export_path: str = Field(default="/srv/k8scifar", description="Absolute directory to export.")
    allowed_networks: list[str] | None = Field(
        default=None,
        description="CIDRs allowed to mount (default: each node's address as a /32 or /128).",
    )
    purge_on_destroy: bool = Field(
        default=False, description="Delete the export's data on `pulumi destroy` (kept by default)."
    )

    @field_validator("export_path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        path = Path(value)
        if not path.is_absolute() or ".." in path.parts or path == Path("/"):
            raise ValueError(f"{value!r} must be an absolute directory below / such as /srv/k8scifar")
        return str(path)

    @field_validator("allowed_networks")
    @classmethod
    def _cidrs(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("is empty; list the CIDRs that may mount, or leave the key out")
        networks = []
        for cidr in value:
            try:
                networks.append(str(ipaddress.ip_network(cidr, strict=True)))
            except ValueError as err:
                raise ValueError(f"{cidr!r} is not a CIDR such as 192.168.1.0/24 ({err})") from None
        return networks


class Registry(_Model):
    """The in-cluster registry the trainer image is built into and pulled from over plain HTTP."""

    port: int = Field(
        default=30500, ge=30000, le=32767, description="NodePort the nodes pull from (30000-32767)."
    )


class Airgap(_Model):
    """Install k3s from local files instead of the internet."""

    k3s_binary: str = Field(
        alias="k3sBinary", description="Path on the operator's machine to the k3s binary."
    )
    images_tarball: str = Field(description="Path to k3s-airgap-images-<arch>.tar(.zst).")

    @field_validator("k3s_binary", "images_tarball")
    @classmethod
    def _exists(cls, value: str) -> str:
        path = Path(value).expanduser()
        if not path.is_file():
            raise ValueError(f"{value!r} does not exist on this machine; download it first")
        return str(path)


class Trainer(_Model):
    """The DDP training run the StatefulSet executes."""

    model: Model = Field(default=Model.AIRBENCH, description="`airbench` (default) or `resnet9`.")
    replicas: int | None = Field(
        default=None, ge=1, description="Ranks (pods); default: one per node that can take one."
    )
    placement: Placement = Field(default=Placement.SPREAD, description="`spread` or `pack`.")
    epochs: int = Field(default=10, ge=1, le=1000, description="Epochs to train.")
    batch_size: int = Field(
        default=1024, ge=1, le=65536, description="Global batch size, fixed whatever the world size."
    )
    learning_rate: float | None = Field(
        default=None, gt=0, le=100, description="Learning rate; default: the model's recipe."
    )
    seed: int = Field(default=0, ge=0, description="Seed for data order, augmentation and init.")
    backend: Backend = Field(default=Backend.AUTO, description="`auto`, `nccl` or `gloo`.")
    compression: Compression = Field(
        default=Compression.NONE,
        description="Gradient compression for slow links: `none`, `fp16`, `bf16`, `powersgd`.",
    )
    target_accuracy: float = Field(
        default=0.94, gt=0, le=1, description="Test accuracy whose time is reported."
    )
    port: int = Field(default=29500, ge=1024, le=65535, description="Rendezvous port (MASTER_PORT).")
    host_network: bool = Field(
        default=False,
        description="Run ranks on the host network (faster collectives, node interfaces).",
    )
    uid: int = Field(
        default=10001,
        ge=1,
        description="Non-root user the pods and the export use; not a login user of the hosts.",
    )
    checkpoint_keep: int = Field(default=3, ge=1, le=100, description="Checkpoints kept per run.")


# Sweep parameter names (camelCase, as in the stack file) and the trainer flag each one sets.
SWEEP_PARAMETERS = {
    "learningRate": "lr",
    "batchSize": "batch_size",
    "epochs": "epochs",
    "weightDecay": "weight_decay",
    "momentum": "momentum",
    "labelSmoothing": "label_smoothing",
    "model": "model",
}


class Range(_Model):
    """A continuous range for random search."""

    min: float
    max: float
    log: bool = Field(default=False, description="Sample uniformly in log space.")


class Sweep(_Model):
    """A hyperparameter search run as an Indexed Job, one set per completion index."""

    strategy: SweepStrategy = Field(default=SweepStrategy.GRID, description="`grid` or `random`.")
    samples: int | None = Field(default=None, ge=1, le=1000, description="Sets to draw (random).")
    seed: int = Field(default=0, ge=0, description="Seed of the random draw.")
    parallelism: int | None = Field(
        default=None, ge=1, description="Sets run at once; default and maximum: the lab's GPUs."
    )
    parameters: dict[str, list[float | int | str] | Range] = Field(
        description="Parameter name to a list of values (grid, random) or a range (random)."
    )

    @field_validator("parameters")
    @classmethod
    def _known(cls, value: dict[str, Any]) -> dict[str, Any]:
        if not value:
            raise ValueError("is empty; name at least one parameter, e.g. learningRate: [0.1, 0.2]")
        for name, values in value.items():
            if name not in SWEEP_PARAMETERS:
                raise ValueError(f"unknown parameter {name!r}; choose from {', '.join(SWEEP_PARAMETERS)}")
            if isinstance(values, list) and not values:
                raise ValueError(f"{name} has no values; give at least one")
            if isinstance(values, Range) and not values.min < values.max:
                raise ValueError(f"{name}: min must be below max")
            if isinstance(values, Range) and values.log and values.min <= 0:
                raise ValueError(f"{name}: a log range needs min > 0")
        return value

    def space(self) -> dict[str, Any]:
        """The search space in the trainer's sweep-file format (snake_case trainer flags)."""
        params = {
            SWEEP_PARAMETERS[name]: v.model_dump() if isinstance(v, Range) else list(v)
            for name, v in self.parameters.items()
        }
        return {
            "strategy": self.strategy.value,
            "samples": self.samples,
            "seed": self.seed,
            "parameters": params,
        }

    def size(self) -> int:
        """How many hyperparameter sets the space holds."""
        if self.strategy is SweepStrategy.RANDOM:
            return self.samples or 0
        return math.prod(len(v) for v in self.parameters.values() if isinstance(v, list))


class LabConfig(_Model):
    """Everything one stack says about the lab."""

    distribution: Distribution = Field(default=Distribution.K3S, description="`k3s` or `kubeadm`.")
    kubernetes_version: str = Field(
        default="1.33.5", description="Kubernetes release MAJOR.MINOR.PATCH (1.25 to 1.37)."
    )
    nodes: list[Node] = Field(min_length=1, description="The machines; exactly one is `server`.")
    ssh: Ssh = Field(default_factory=Ssh)
    nfs: Nfs = Field(default_factory=Nfs)
    registry: Registry = Field(default_factory=Registry)
    airgap: Airgap | None = Field(default=None, description="k3s only: install from local files.")
    namespace: DnsLabel = Field(default="k8scifar", description="Namespace of every lab object.")
    trainer: Trainer = Field(default_factory=Trainer)
    sweep: Sweep | None = Field(default=None, description="Optional hyperparameter sweep.")
    skip: dict[SkipStep, Annotated[str, StringConstraints(min_length=1)]] = Field(
        default_factory=dict,
        description="Steps to leave out, each mapped to the reason printed when it is skipped"
        " (for test machines that cannot run them, never for a real lab).",
    )

    @field_validator("kubernetes_version")
    @classmethod
    def _version(cls, value: str) -> str:
        match = re.fullmatch(r"v?1\.(\d+)\.(\d+)", value)
        if not match:
            raise ValueError(f"{value!r} is not a release such as 1.33.5")
        if int(match.group(1)) not in SUPPORTED_K8S_MINORS:
            raise ValueError(f"{value!r} is outside the supported 1.25 to 1.37")
        return value.removeprefix("v")

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
    def kubernetes_minor(self) -> str:
        return ".".join(self.kubernetes_version.split(".")[:2])

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
    def installs_kubernetes(self) -> bool:
        """False on machines that skip the Kubernetes install: there is no cluster to declare into."""
        return SkipStep.KUBERNETES_INSTALL not in self.skip

    @property
    def replicas(self) -> int:
        """Ranks of the training run: as configured, else as many as the placement allows."""
        return self.trainer.replicas or self.max_replicas

    @property
    def max_replicas(self) -> int:
        """Ranks the lab can place: a rank needs a whole GPU on GPU labs, a whole node with spread."""
        if self.trainer.placement is Placement.SPREAD:
            return len(self.gpu_nodes) if self.has_gpus else len(self.nodes)
        return max(n.gpus for n in self.nodes) if self.has_gpus else 2

    @property
    def backend(self) -> str:
        if self.trainer.backend is Backend.AUTO:
            return "nccl" if self.has_gpus else "gloo"
        return self.trainer.backend.value

    @property
    def sweep_parallelism(self) -> int:
        limit = self.total_gpus if self.has_gpus else len(self.nodes)
        return min(self.sweep.parallelism or limit, limit) if self.sweep else 0


def _cross_checks(cfg: LabConfig) -> list[str]:
    """Rules that involve more than one key; each problem names its key and the fix."""
    problems: list[str] = []
    names = [n.name for n in cfg.nodes]
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"k8scifar:nodes: two nodes are named {name!r}; give each node its own name")
    addresses = [n.address for n in cfg.nodes]
    for addr in sorted({a for a in addresses if addresses.count(a) > 1}):
        problems.append(f"k8scifar:nodes: two nodes share the address {addr}; each node needs its own")
    servers = [n.name for n in cfg.nodes if n.role is Role.SERVER]
    if len(servers) != 1:
        problems.append(
            f"k8scifar:nodes: {len(servers)} nodes have role server ({', '.join(servers) or 'none'});"
            " exactly one node must be the server, the others agents"
        )
        return problems  # the checks below need the server
    if cfg.nfs.server is not None and cfg.nfs.server not in names:
        problems.append(
            f"k8scifar:nfs.server: {cfg.nfs.server!r} is not a node; use one of {', '.join(names)}"
        )
    if cfg.nfs.allowed_networks is not None:
        nets = [ipaddress.ip_network(c) for c in cfg.nfs.allowed_networks]
        for node in cfg.nodes:
            ip = ipaddress.ip_address(node.address)
            if not any(ip.version == net.version and ip in net for net in nets):
                problems.append(
                    f"k8scifar:nfs.allowedNetworks: node {node.name} ({node.address}) is in none of"
                    f" {', '.join(cfg.nfs.allowed_networks)}; it could not mount the share"
                )
    if cfg.airgap is not None and cfg.distribution is not Distribution.K3S:
        problems.append("k8scifar:airgap: only k3s installs from local files; remove it or use k3s")
    if cfg.trainer.backend is Backend.NCCL and not cfg.has_gpus:
        problems.append("k8scifar:trainer.backend: nccl needs GPUs and no node has any; use gloo or auto")
    if cfg.trainer.replicas is not None and cfg.trainer.replicas > cfg.max_replicas:
        where = "GPU nodes" if cfg.has_gpus else "nodes"
        if cfg.trainer.placement is Placement.SPREAD:
            why = f"spread puts one rank per node and the lab has {cfg.max_replicas} {where}"
        else:
            why = f"pack puts every rank on one node and the largest holds {cfg.max_replicas}"
            why += " GPUs" if cfg.has_gpus else " ranks"
        problems.append(
            f"k8scifar:trainer.replicas: {cfg.trainer.replicas} ranks cannot be placed: {why};"
            f" set replicas to at most {cfg.max_replicas} or change placement"
        )
    if cfg.sweep is not None:
        problems.extend(_sweep_checks(cfg))
    return problems


def _sweep_checks(cfg: LabConfig) -> list[str]:
    sweep = cfg.sweep
    assert sweep is not None
    problems = []
    ranges = [name for name, v in sweep.parameters.items() if isinstance(v, Range)]
    if sweep.strategy is SweepStrategy.GRID:
        if ranges:
            problems.append(
                f"k8scifar:sweep.parameters: {', '.join(ranges)} is a range, which a grid cannot"
                " enumerate; give a list of values or use strategy: random"
            )
        if sweep.samples is not None:
            problems.append("k8scifar:sweep.samples: only random search draws samples; remove it")
    elif sweep.samples is None:
        problems.append("k8scifar:sweep.samples: random search needs the number of sets to draw")
    models = sweep.parameters.get("model")
    if isinstance(models, list):
        bad = [m for m in models if m not in {m.value for m in Model}]
        if bad:
            problems.append(
                f"k8scifar:sweep.parameters.model: unknown model {bad[0]!r}; use airbench or resnet9"
            )
    limit = cfg.total_gpus if cfg.has_gpus else len(cfg.nodes)
    if sweep.parallelism is not None and sweep.parallelism > limit:
        problems.append(
            f"k8scifar:sweep.parallelism: {sweep.parallelism} exceeds the {limit}"
            f" {'GPUs' if cfg.has_gpus else 'nodes'} of the lab; lower it or leave it out"
        )
    return problems


def _path(loc: tuple[int | str, ...]) -> str:
    out = "k8scifar:"
    for i, part in enumerate(loc):
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if i else "") + part
    return out


def _describe(err: Mapping[str, Any]) -> str:
    loc = tuple(p for p in err["loc"] if p not in {"list[union[float,int,str]]", "Range"})
    kind = err["type"]
    if kind == "extra_forbidden":
        return f"{_path(loc)}: unknown key; check its spelling against docs/configuration.md"
    if kind == "missing":
        return f"{_path(loc)}: required key is missing"
    message = str(err["msg"]).removeprefix("Value error, ")
    if kind.startswith("string_pattern"):
        message = f"{err.get('input')!r} is not a lowercase DNS label (letters, digits, '-')"
    elif kind in {"enum", "literal_error"}:
        message = f"{err.get('input')!r}: {message.lower()}"
    elif "input" in err and kind not in {"value_error", "assertion_error"}:
        message = f"{message} (got {err['input']!r})"
    return f"{_path(loc)}: {message}"


def parse_config(values: Mapping[str, Any], source: str = "stack configuration") -> LabConfig:
    """Validate `k8scifar:*` values (prefix already stripped); raise ConfigError naming every problem."""
    try:
        cfg = LabConfig.model_validate(dict(values))
    except ValidationError as exc:
        problems = list(dict.fromkeys(_describe(e) for e in exc.errors()))
        raise ConfigError(source, problems) from None
    problems = _cross_checks(cfg)
    if problems:
        raise ConfigError(source, problems)
    return cfg


def stack_file(stack: str, stacks_dir: Path = STACKS_DIR) -> Path:
    return stacks_dir / f"Pulumi.{stack}.yaml"


def read_stack_values(path: Path) -> dict[str, Any]:
    """The `k8scifar:*` values of a stack file, prefix stripped; ConfigError when unreadable."""
    if not path.is_file():
        existing = ", ".join(all_stacks(path.parent)) or "none"
        raise ConfigError(
            str(path),
            [f"no such stack file; existing stacks: {existing} (create one with `labctl init`)"],
        )
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(str(path), [f"not valid YAML: {exc}"]) from None
    config = doc.get("config") if isinstance(doc, dict) else None
    if not isinstance(config, dict):
        raise ConfigError(str(path), ["has no `config:` mapping with k8scifar:* keys"])
    values: dict[str, Any] = {}
    problems = []
    for key, value in config.items():
        project, _, name = str(key).partition(":")
        if project != PROJECT or not name:
            problems.append(f"{key}: keys must be written k8scifar:NAME")
        else:
            values[name] = value
    if problems:
        raise ConfigError(str(path), problems)
    return values


def load_stack(stack: str, stacks_dir: Path = STACKS_DIR) -> LabConfig:
    """The validated configuration of `stacks/Pulumi.<stack>.yaml`."""
    path = stack_file(stack, stacks_dir)
    return parse_config(read_stack_values(path), source=str(path))


def from_pulumi() -> LabConfig:
    """The validated configuration of the running Pulumi stack, every `k8scifar:*` key of it.

    The language host hands the program the stack's whole configuration as strings, objects and
    lists as JSON, `secure:` values decrypted, their keys listed as secret, in PULUMI_CONFIG and
    PULUMI_CONFIG_SECRET_KEYS (pulumi/pulumi: sdk/python/cmd/pulumi-language-python/main.go), and
    the SDK's launcher loads both before the program starts (sdk/python/cmd/
    pulumi-language-python-exec: set_all_config). Keys of other namespaces (`kubernetes:*`,
    `pulumi:*`) belong to others and are left alone.
    """
    import pulumi
    from pulumi.runtime import config as runtime_config

    prefix = f"{PROJECT}:"
    names = set(runtime_config.get_config_env()) | set(runtime_config.CONFIG.get())
    values: dict[str, Any] = {}
    problems = []
    for key in sorted(k for k in names if k.startswith(prefix)):
        if runtime_config.is_config_secret(key):
            # Every value of the lab ends up in plain text in the inventory, the state and on the
            # nodes: encrypting it in the stack file would only pretend to keep it secret.
            problems.append(
                f"{key}: is stored encrypted (secure:), but the lab keeps no value of its stack"
                " file secret; set it in plain text (`pulumi config set` without --secret)"
            )
            continue
        values[key.removeprefix(prefix)] = _from_text(runtime_config.get_config(key))
    source = f"stack {pulumi.get_stack()!r}"
    if problems:
        raise ConfigError(source, problems)
    return parse_config(values, source=source)


def _from_text(raw: str) -> Any:
    """A value as the stack file holds it: objects and lists come as JSON, scalars as their text,
    which the model converts as it converts the stack file's own scalars."""
    if raw.lstrip().startswith(("{", "[")):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def all_stacks(stacks_dir: Path = STACKS_DIR) -> list[str]:
    return sorted(
        p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in stacks_dir.glob("Pulumi.*.yaml")
    )


__all__ = [
    "SWEEP_PARAMETERS",
    "ConfigError",
    "LabConfig",
    "Node",
    "all_stacks",
    "from_pulumi",
    "load_stack",
    "parse_config",
    "read_stack_values",
    "stack_file",
]
