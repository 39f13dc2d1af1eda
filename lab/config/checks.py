"""The rules of the configuration that involve more than one key; each problem names its key and the fix."""

from __future__ import annotations

import ipaddress
from typing import Any

from lab.config.facts import (
    CLUSTER_NETWORKS,
    EPHEMERAL_PORTS,
    KUBEADM_SERVER_PORTS,
    KUEUE_MIN_K8S_MINOR,
    NFS_PORT,
    NODE_PORT_RANGE,
    NODE_PORTS,
    SERVER_PORTS,
    WIDEST_NETWORK_PREFIX,
)
from lab.config.lab_config import LabConfig
from lab.config.machines import Distribution, Node, Role
from lab.config.workload import (
    SWEEP_PARAMETERS,
    Backend,
    GangScheduler,
    Placement,
    Range,
    Sweep,
    SweepStrategy,
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
    if cfg.airgap is not None and cfg.distribution is not Distribution.K3S:
        problems.append("k8scifar:airgap: only k3s installs from local files; remove it or use k3s")
    if cfg.trainer.backend is Backend.NCCL and not cfg.has_gpus:
        problems.append("k8scifar:trainer.backend: nccl needs GPUs and no node has any; use gloo or auto")
    if cfg.trainer.replicas is not None and cfg.trainer.replicas > cfg.max_replicas:
        problems.append(_placement_problem(cfg, cfg.trainer.replicas))
    # Left out, the batch is the default or the nearest that splits (lab.config.batch): only the
    # stack's is refused.
    if cfg.batch_set_by_stack and cfg.trainer.batch_size % cfg.replicas:
        problems.append(
            f"k8scifar:trainer.batchSize: {cfg.trainer.batch_size} does not split evenly over"
            f" {cfg.replicas} ranks; use {nearest_batch(cfg.trainer.batch_size, cfg.replicas)},"
            f" the nearest multiple of {cfg.replicas}"
        )
    problems.extend(_port_checks(cfg))
    problems.extend(_metrics_port_checks(cfg))
    if cfg.sweep is not None:
        problems.extend(_sweep_checks(cfg))
    if cfg.scheduling.kueue_installed and cfg.gang_scheduler is not GangScheduler.KUEUE:
        problems.append(
            "k8scifar:scheduling.kueueInstalled: the lab's gang scheduler is none, so it uses no Kueue;"
            " remove kueueInstalled or set scheduling.gang: kueue"
        )
    if cfg.scheduling.gang is GangScheduler.KUEUE and cfg.kubernetes_minor < KUEUE_MIN_K8S_MINOR:
        problems.append(
            f"k8scifar:scheduling.gang: Kueue needs Kubernetes 1.{KUEUE_MIN_K8S_MINOR} or later and the lab"
            f" runs {cfg.kubernetes_version}; use none or a newer kubernetesVersion"
        )
    return problems


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


def _users(cfg: LabConfig, ports: range) -> list[str]:
    """What already listens on any of `ports`: the cluster, on any node and under any distribution
    (and the lab's node exporter); on the host network also SSH and the NodePorts kube-proxy may
    hold."""
    taken = NODE_PORTS | SERVER_PORTS | KUBEADM_SERVER_PORTS | NFS_PORT
    taken[(cfg.registry.port, "tcp")] = "registry NodePort"
    if cfg.observability.enabled:
        taken[(cfg.observability.node_exporter_port, "tcp")] = "the node exporter"
    users = sorted({why for (number, _), why in taken.items() if number in ports})
    if cfg.trainer.host_network:
        if cfg.ssh.port in ports:
            users.append("SSH")
        if (
            range(max(ports.start, NODE_PORT_RANGE.start), min(ports.stop, NODE_PORT_RANGE.stop))
            and not users
        ):
            users.append(f"the NodePort range {NODE_PORT_RANGE.start}-{NODE_PORT_RANGE.stop - 1}")
    return users


def _port_checks(cfg: LabConfig) -> list[str]:
    """The rendezvous port is none the cluster uses."""
    port = cfg.trainer.port
    users = _users(cfg, range(port, port + 1))
    if not users:
        return []
    return [
        f"k8scifar:trainer.port: {port} collides with {' and '.join(users)}; choose a free port"
        " such as the default 29500"
    ]


def _metrics_port_checks(cfg: LabConfig) -> list[str]:
    """Each worker of a pod serves its metrics on metricsPort plus its LOCAL_RANK
    (trainer/pod/telemetry.py): none of those ports may be rank 0's rendezvous port, one the cluster
    uses, or in the ephemeral range where the ranks' stores and collectives bind."""
    if not cfg.observability.enabled:
        return []
    port = cfg.observability.metrics_port
    ports = range(port, port + cfg.world.ranks_per_pod)
    shown = f"{port}" if len(ports) == 1 else f"{port} (to {ports[-1]}, a port for each rank of a pod)"
    users = _users(cfg, ports)
    if cfg.trainer.port in ports:
        users.insert(0, f"trainer.port {cfg.trainer.port}, where rank 0's rendezvous listens")
    if ports[-1] >= EPHEMERAL_PORTS[0]:
        users.append(
            f"the ephemeral ports {EPHEMERAL_PORTS[0]}-{EPHEMERAL_PORTS[1]} the ranks' stores and"
            " collectives bind"
        )
    if not users:
        return []
    return [
        f"k8scifar:observability.metricsPort: {shown} collides with {' and '.join(users)}; choose"
        " another port such as the default 9464"
    ]


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
