"""The rules of the configuration that involve more than one key; each problem names its key and the fix."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import annotated_types
from pydantic.alias_generators import to_camel

from lab.config.facts import (
    CLUSTER_NETWORKS,
    EPHEMERAL_PORTS,
    HELD_PORTS,
    KUBEADM_AIRGAP_MIN_MINOR,
    KUBEADM_SERVER_PORTS,
    KUEUE_MIN_K8S_MINOR,
    NFS_PORT,
    NODE_PORT_RANGE,
    NODE_PORTS,
    SERVER_PORTS,
    WIDEST_NETWORK_PREFIX,
)
from lab.config.keys import KeyModel
from lab.config.lab_config import LabConfig
from lab.config.machines import Airgap, Distribution, Node, Registry, Role
from lab.config.workload import (
    SWEEP_PARAMETERS,
    Backend,
    GangScheduler,
    Observability,
    Placement,
    Range,
    Sweep,
    SweepStrategy,
    Trainer,
)
from lab.config.world import CPU_PACK_RANKS
from trainer import sweep as trainer_sweep
from trainer.hyperparameters import HyperparameterError, nearest_batch
from trainer.hyperparameters import check as check_hyperparameter


def cross_checks(cfg: LabConfig) -> list[str]:
    """Rules that involve more than one key; each problem names its key and the fix."""
    problems: list[str] = []
    names = [n.name for n in cfg.nodes]
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"k8scifar:nodes: two nodes are named {name!r}; give each node its own name")
    addresses = [n.address for n in cfg.nodes]
    loopback = [n.name for n in cfg.nodes if ipaddress.ip_address(n.address).is_loopback]
    if len(loopback) > 1:
        # Every loopback address is this machine: they are one node (`labctl doctor` finds nodes
        # that share a machine under other addresses).
        problems.append(
            f"k8scifar:nodes: {', '.join(loopback)} have loopback addresses, which are all this one"
            " machine; give each node the address of its own machine"
        )
    elif loopback and len(cfg.nodes) > 1:
        # A node on a loopback address is one machine, which no other node can reach there.
        problems.append(
            f"k8scifar:nodes: {', '.join(loopback)} has a loopback address, which the other nodes"
            " cannot reach; use its address on the lab's network"
        )
    for addr in sorted({a for a in addresses if addresses.count(a) > 1}):
        problems.append(f"k8scifar:nodes: two nodes share the address {addr}; each node needs its own")
    problems.extend(_cluster_network_checks(cfg))
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
        problems.extend(_network_checks(cfg))
    if cfg.kubeconfig is not None and not cfg.installs_kubernetes:
        problems.append(
            "k8scifar:kubeconfig: names a cluster, and skip.kubernetesInstall says there is none;"
            " remove one of them"
        )
    problems.extend(_kubeconfig_problems(cfg))
    if cfg.airgap is not None:
        problems.extend(_airgap_checks(cfg, cfg.airgap))
    if cfg.trainer.backend is Backend.NCCL and not cfg.has_gpus:
        problems.append("k8scifar:trainer.backend: nccl needs GPUs and no node has any; use gloo or auto")
    if cfg.trainer.replicas is not None and cfg.trainer.replicas > cfg.max_replicas:
        # The batch's split is checked against ranks that fit: a batch for more ranks than the lab
        # holds would be offered for a count the operator is told to lower.
        problems.append(_placement_problem(cfg, cfg.trainer.replicas))
    # Left out, the batch is the default or the nearest that splits (lab.config.batch): only the
    # stack's is refused.
    elif cfg.batch_set_by_stack and cfg.trainer.batch_size % cfg.replicas:
        problems.append(
            f"k8scifar:trainer.batchSize: {cfg.trainer.batch_size} does not split evenly over"
            f" {cfg.replicas} ranks; use {nearest_batch(cfg.trainer.batch_size, cfg.replicas)},"
            f" the nearest multiple of {cfg.replicas}"
        )
    problems.extend(_host_port_checks(cfg))
    if cfg.sweep is not None:
        problems.extend(_sweep_checks(cfg))
    problems.extend(_provides_problems(cfg))
    if cfg.scheduling.gang is GangScheduler.KUEUE and cfg.kubernetes_minor < KUEUE_MIN_K8S_MINOR:
        problems.append(
            f"k8scifar:scheduling.gang: Kueue needs Kubernetes 1.{KUEUE_MIN_K8S_MINOR} or later and the lab"
            f" runs {cfg.kubernetes_version}; use none or a newer kubernetesVersion"
        )
    return problems


def _airgap_checks(cfg: LabConfig, airgap: Airgap) -> list[str]:
    """The airgap keys of the stack's distribution present, and none of the other's."""
    if cfg.distribution is Distribution.K3S:
        if airgap.kubeadm is not None:
            return [
                "k8scifar:airgap.kubeadm: lists kubeadm's files and the stack installs k3s; remove it and"
                " give k3sBinary and imagesTarball, or set distribution: kubeadm"
            ]
        missing = [
            key
            for key, value in (("k3sBinary", airgap.k3s_binary), ("imagesTarball", airgap.images_tarball))
            if value is None
        ]
        if missing:
            return [
                f"k8scifar:airgap: a k3s install from local files needs k3sBinary and imagesTarball;"
                f" add {' and '.join(missing)}"
            ]
        return []
    k3s_keys = [
        key
        for key, value in (("k3sBinary", airgap.k3s_binary), ("imagesTarball", airgap.images_tarball))
        if value is not None
    ]
    if k3s_keys:
        return [
            f"k8scifar:airgap.{k3s_keys[0]}: is k3s's and the stack installs kubeadm; remove"
            f" {' and '.join(k3s_keys)} and list kubeadm's files under airgap.kubeadm"
        ]
    if airgap.kubeadm is None:
        return [
            "k8scifar:airgap: a kubeadm install from local files needs its files under airgap.kubeadm"
            " (docs/hosts.md, Offline kubeadm); add them, or remove airgap to install from the internet"
        ]
    if cfg.kubernetes_minor < KUBEADM_AIRGAP_MIN_MINOR:
        return [
            f"k8scifar:airgap.kubeadm: kubeadm {cfg.kubernetes_version} needs crictl, which an offline"
            f" install does not carry; use kubernetesVersion 1.{KUBEADM_AIRGAP_MIN_MINOR} or later, or"
            " install from the internet"
        ]
    return []


def _placement_problem(cfg: LabConfig, replicas: int) -> str:
    """Why `replicas` ranks do not fit; on a GPU lab the count comes from the nodes' gpus keys,
    which are named, for the cause may lie there (a node left without its gpus)."""
    gpus = ", ".join(
        f"{n.name} has {n.gpus} (k8scifar:nodes[{cfg.nodes.index(n)}].gpus)" for n in cfg.gpu_nodes
    )
    if cfg.has_gpus and (cfg.trainer.placement is Placement.SPREAD or cfg.packs_by_topology):
        why = f"a rank needs a GPU of its own and the lab has {cfg.max_replicas} ({gpus})"
        fix = "give the other nodes their gpus, "
    elif cfg.trainer.placement is Placement.SPREAD:
        why, fix = f"spread puts one rank per node and the lab has {cfg.max_replicas} nodes", ""
    elif cfg.has_gpus:
        why = (
            f"pack without Kueue puts every rank in one pod on one node and the largest holds"
            f" {cfg.max_replicas} GPUs ({gpus})"
        )
        fix = "use scheduling.gang: kueue to pack over several nodes, "
    else:
        why = f"pack puts every rank on one node, {CPU_PACK_RANKS} at most on a CPU node"
        fix = ""
    return (
        f"k8scifar:trainer.replicas: {replicas} ranks cannot be placed: {why};"
        f" set replicas to at most {cfg.max_replicas}, {fix}or change placement"
    )


def _cluster_networks(cfg: LabConfig) -> list[tuple[str, ipaddress.IPv4Network]]:
    pod, service = CLUSTER_NETWORKS[cfg.distribution.value]
    return [
        (f"{cfg.distribution.value}'s pod network", ipaddress.IPv4Network(pod)),
        (f"{cfg.distribution.value}'s Service network", ipaddress.IPv4Network(service)),
    ]


def _cluster_network_checks(cfg: LabConfig) -> list[str]:
    """No node sits inside the networks the cluster gives its pods and Services: every node would
    route that address to the cluster's own overlay, and the node could not be reached."""
    problems = []
    for i, node in enumerate(cfg.nodes):
        ip = ipaddress.ip_address(node.address)
        for what, network in _cluster_networks(cfg):
            if ip in network:
                problems.append(
                    f"k8scifar:nodes[{i}].address: {node.address} is inside {what} {network}, which"
                    " the cluster routes to its pods and Services; give the node an address outside"
                    f" {network} (its address on the lab's network)"
                )
    return problems


def _network_checks(cfg: LabConfig) -> list[str]:
    """Every node can mount, and only networks that hold a node, no wider than allowed and not
    the cluster's own, may; together they never admit every address."""
    problems = []
    nets = [ipaddress.ip_network(c) for c in cfg.nfs_allowed_networks]
    ips = {n.name: ipaddress.ip_address(n.address) for n in cfg.nodes}
    for node in cfg.nodes:
        if not any(ips[node.name] in net for net in nets if net.version == 4):
            problems.append(
                f"k8scifar:nfs.allowedNetworks: node {node.name} ({node.address}) is in none of"
                f" {', '.join(cfg.nfs_allowed_networks)}; it could not mount the share"
            )
    for net in nets:
        if not any(net.version == 4 and ip in net for ip in ips.values()):
            problems.append(
                f"k8scifar:nfs.allowedNetworks: {net} holds no node, so it only lets other"
                " machines mount the export; remove it"
            )
        elif net.prefixlen < WIDEST_NETWORK_PREFIX and not cfg.nfs.allow_wide_networks:
            problems.append(
                f"k8scifar:nfs.allowedNetworks: {net} lets {net.num_addresses} addresses mount the"
                f" export read-write; list the nodes' /{WIDEST_NETWORK_PREFIX} or their /32s, or set"
                " nfs.allowWideNetworks: true if every host in it may"
            )
        for what, cluster in _cluster_networks(cfg):
            if net.version == 4 and net.overlaps(cluster):
                problems.append(
                    f"k8scifar:nfs.allowedNetworks: {net} holds {what} {cluster}, so every pod could"
                    " mount the export read-write; list the nodes' own networks only"
                )
    problems.extend(_union_checks(cfg, nets))
    return problems


def _union_checks(cfg: LabConfig, nets: list[Any]) -> list[str]:
    """What the networks admit together: never every address, and no wider than one may alone."""
    problems = []
    for version, everyone in ((4, ipaddress.ip_network("0.0.0.0/0")), (6, ipaddress.ip_network("::/0"))):
        listed = [n for n in nets if n.version == version]
        for union in ipaddress.collapse_addresses(listed):
            if union == everyone:
                problems.append(
                    f"k8scifar:nfs.allowedNetworks: {', '.join(map(str, listed))} together admit every"
                    f" address ({everyone}): a read-write export to any network; list the lab's network,"
                    " such as 192.168.1.0/24"
                )
            elif (
                union not in listed
                and union.prefixlen < WIDEST_NETWORK_PREFIX
                and not cfg.nfs.allow_wide_networks
            ):
                parts = ", ".join(str(n) for n in listed if n.subnet_of(union))
                problems.append(
                    f"k8scifar:nfs.allowedNetworks: {parts} together make {union}, which lets"
                    f" {union.num_addresses} addresses mount the export read-write; list the nodes'"
                    f" /32s, or set nfs.allowWideNetworks: true if every host in it may"
                )
    return problems


def cluster_ports(cfg: LabConfig, node: Node) -> dict[tuple[int, str], str]:
    """(port, protocol) -> purpose, for the ports the cluster itself listens on at this node."""
    ports = dict(NODE_PORTS)
    ports[(cfg.registry.port, "tcp")] = "registry NodePort"
    if node.role is Role.SERVER:
        ports |= SERVER_PORTS
        if cfg.distribution is Distribution.KUBEADM:
            ports |= KUBEADM_SERVER_PORTS
    if node.name == cfg.nfs_server.name:
        ports |= NFS_PORT
    return ports


@dataclass(frozen=True)
class _HostPort:
    """Ports the lab takes on its nodes from `first` on (a rank each for the metrics port), and the
    stack key that moves them."""

    key: str
    what: str
    first: int
    count: int
    default: int
    bounds: range  # what the key accepts
    host_network: bool  # listens on the node's own network, beside SSH and kube-proxy's NodePorts
    node_port: bool = False  # a NodePort itself, which kube-proxy routes

    @property
    def ports(self) -> range:
        return range(self.first, self.first + self.count)

    @property
    def moved(self) -> bool:
        return self.first != self.default

    @property
    def holder(self) -> str:
        return f"{self.what} ({self.key} {self.first})"


def _key_limits(model: type[KeyModel], field: str) -> tuple[int, range]:
    """The default of an integer key and the values it accepts, as its model declares them."""
    info = model.model_fields[field]
    low = next(cast(int, m.ge) for m in info.metadata if isinstance(m, annotated_types.Ge))
    high = next(cast(int, m.le) for m in info.metadata if isinstance(m, annotated_types.Le))
    return info.default, range(low, high + 1)


def _lab_ports(cfg: LabConfig) -> list[_HostPort]:
    """The ports the lab takes, in the order a collision of two moved from their defaults is laid
    at the later one's key (a port left at its default is never the one to move)."""
    host = cfg.trainer.host_network
    taken = [
        _HostPort(
            "registry.port", "the registry NodePort", cfg.registry.port, 1,
            *_key_limits(Registry, "port"), host_network=True, node_port=True,
        )
    ]  # fmt: skip
    observability = cfg.observability
    if observability.enabled:
        taken.append(
            _HostPort(
                "observability.nodeExporterPort", "the node exporter", observability.node_exporter_port,
                1, *_key_limits(Observability, "node_exporter_port"), host_network=True,
            )
        )  # fmt: skip
    taken.append(
        _HostPort(
            "trainer.port", "rank 0's rendezvous", cfg.trainer.port, 1, *_key_limits(Trainer, "port"), host
        )
    )
    if observability.enabled:
        taken.append(
            _HostPort(
                "observability.metricsPort", "the ranks' metrics", observability.metrics_port,
                cfg.world.ranks_per_pod, *_key_limits(Observability, "metrics_port"), host,
            )
        )  # fmt: skip
    return taken


def _holders(cfg: LabConfig, taken: list[_HostPort], index: int, first: int, blamed: bool) -> list[str]:
    """What holds any of the ports `taken[index]` would take from `first` on: the cluster's own
    programs (TCP, as every port the lab takes), the lab's other ports, and on the host network SSH
    and the NodePorts. With `blamed`, only the lab's ports this one is to move off."""
    me = taken[index]
    ports = range(first, first + me.count)
    holders = sorted({why for (port, proto), why in HELD_PORTS.items() if proto == "tcp" and port in ports})
    for other_index, other in enumerate(taken):
        overlap = range(max(ports.start, other.first), min(ports.stop, other.ports.stop))
        to_move = me.moved and (other_index < index or not other.moved)
        if other_index != index and overlap and (to_move or not blamed):
            holders.append(other.holder)
    if me.host_network:
        if cfg.ssh.port in ports:
            holders.append(f"SSH (ssh.port {cfg.ssh.port})")
        node_ports = range(max(ports.start, NODE_PORT_RANGE.start), min(ports.stop, NODE_PORT_RANGE.stop))
        if node_ports and not me.node_port and not holders:
            holders.append(f"the NodePort range {NODE_PORT_RANGE.start}-{NODE_PORT_RANGE.stop - 1}")
    # A key held below the ephemeral ports (the metrics port) keeps its ranks' ports below them too.
    if me.bounds.stop <= EPHEMERAL_PORTS[0] < ports.stop:
        holders.append(
            f"the ephemeral ports {EPHEMERAL_PORTS[0]}-{EPHEMERAL_PORTS[1]} the ranks' stores and"
            " collectives bind"
        )
    return holders


def _host_port_checks(cfg: LabConfig) -> list[str]:
    """No port the lab takes is one the nodes already hold (facts.HELD_PORTS, SSH, kube-proxy's
    NodePorts) or another of the lab's; each collision names both holders and a port that is free."""
    taken = _lab_ports(cfg)
    problems = []
    for index, me in enumerate(taken):
        holders = _holders(cfg, taken, index, me.first, blamed=True)
        if not holders:
            continue
        low, high = me.bounds.start, me.bounds.stop
        candidates = [*range(me.default, high), *range(low, me.default)]
        free = next(p for p in candidates if not _holders(cfg, taken, index, p, blamed=False))
        shown = (
            f"{me.first}"
            if me.count == 1
            else f"{me.first} (to {me.ports[-1]}, a port for each rank of a pod)"
        )
        such = f"the default {free}" if free == me.default else f"{free}"
        problems.append(
            f"k8scifar:{me.key}: {shown} collides with {' and '.join(holders)}; choose a free port"
            f" such as {such}"
        )
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
    for name, values in sweep.parameters.items():
        flag = SWEEP_PARAMETERS[name]
        items = (
            [(f"item {i + 1}", v) for i, v in enumerate(values)]
            if isinstance(values, list)
            else [("min", values.min), ("max", values.max)]
        )
        for where, value in items:
            try:
                check_hyperparameter(flag, value)
            except HyperparameterError as err:
                problems.append(f"k8scifar:sweep.parameters.{name}: {where} {err}")
    if not problems:
        problems.extend(_sweep_size_checks(sweep))
    limit = cfg.total_gpus if cfg.has_gpus else len(cfg.nodes)
    if sweep.parallelism is not None and sweep.parallelism > limit:
        problems.append(
            f"k8scifar:sweep.parallelism: {sweep.parallelism} exceeds the {limit}"
            f" {'GPUs' if cfg.has_gpus else 'nodes'} of the lab; lower it or leave it out"
        )
    return problems


def _sweep_size_checks(sweep: Sweep) -> list[str]:
    """The sets fit one Indexed Job and the sweep file one ConfigMap."""
    space = sweep.space()
    try:
        sets = trainer_sweep.count(space)
    except trainer_sweep.SweepError as err:
        return [f"k8scifar:sweep: {err}"]
    if sets > trainer_sweep.MAX_SETS:
        return [
            f"k8scifar:sweep.parameters: the grid holds {sets} sets, more than the"
            f" {trainer_sweep.MAX_SETS} completions of one Indexed Job; give fewer values"
        ]
    size = len(trainer_sweep.sweep_file_text(space).encode())
    if size > trainer_sweep.MAX_FILE_BYTES:
        return [
            f"k8scifar:sweep: its {sets} sets make a sweep file of {size} bytes, more than the"
            f" {trainer_sweep.MAX_FILE_BYTES} a ConfigMap holds; give fewer values or samples"
        ]
    return []


def _provides_problems(cfg: LabConfig) -> list[str]:
    """What the stack says the cluster has, against what the lab would use it for."""
    provides = cfg.provides
    problems = []
    if provides.kueue and cfg.gang_scheduler is not GangScheduler.KUEUE:
        problems.append(
            "k8scifar:provides.kueue: the lab's gang scheduler is none, so it uses no Kueue;"
            " remove provides.kueue or set scheduling.gang: kueue"
        )
    if provides.device_plugin and not cfg.has_gpus:
        problems.append(
            "k8scifar:provides.devicePlugin: no node of the stack has gpus, so the lab uses no device"
            " plugin; remove provides.devicePlugin or give the GPU nodes their gpus"
        )
    if provides.monitoring is not None and not cfg.observability.enabled:
        problems.append(
            "k8scifar:provides.monitoring: observability.enabled is false, so the ranks serve no"
            " metrics for it to scrape; remove provides.monitoring or set observability.enabled: true"
        )
    # The nfs section describes the export the lab makes; with a volume provided it makes none.
    if provides.volume is not None and cfg.nfs.model_fields_set:
        keys = ", ".join(f"nfs.{to_camel(k)}" for k in sorted(cfg.nfs.model_fields_set))
        problems.append(
            f"k8scifar:provides.volume: the lab exports no NFS folder where the cluster provides the"
            f" volume, and the stack sets {keys}; remove the nfs section or provides.volume"
        )
    return problems


def _kubeconfig_problems(cfg: LabConfig) -> list[str]:
    """The stack's kubeconfig as lab.kubeapi reads it: refused here, before any cluster is asked."""
    if cfg.kubeconfig is None:
        if cfg.kubeconfig_context is None:
            return []
        return [
            "k8scifar:kubeconfigContext: picks a context of the stack's kubeconfig; it names none: remove it"
        ]
    # Imported here: the Kubernetes client loads only where a command asks a cluster.
    from lab.kubeapi import KubeconfigRefused, read

    try:
        read(
            Path(cfg.kubeconfig), context=cfg.kubeconfig_context, allow_commands=cfg.allow_kubeconfig_commands
        )
    except KubeconfigRefused as err:
        return [f"k8scifar:kubeconfig: {err}"]
    return []
