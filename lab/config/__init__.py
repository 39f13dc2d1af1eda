"""The lab's stack configuration: one typed, validated object built from the `k8scifar:*` keys.

Every other part of the lab (inventory, Ansible variables, Kubernetes objects, the CLI) reads
this object and nothing else, so a bad value is caught here, named by its key, before any host
is touched. The names below are the package's face; each lives in the module of its job.
"""

from lab.config.checks import (
    cluster_ports,
)
from lab.config.facts import (
    BUILD_NAMESPACE_SUFFIX,
    CLUSTER_NETWORKS,
    DERIVED_NAMESPACE_SUFFIXES,
    DNS_LABEL_MAX,
    EPHEMERAL_PORTS,
    EXPORTERS_NAMESPACE_SUFFIX,
    GPU_NAMESPACE_SUFFIX,
    KNOWN_PATCHES,
    KUBELET_PORT,
    MAX_NODE_GPUS,
    MONITORING_NAMESPACE_SUFFIX,
    NFS_PORT_NUMBER,
    PROJECT,
    VXLAN_PORT,
)
from lab.config.lab_config import (
    LabConfig,
)
from lab.config.loading import (
    all_stacks,
    check_stack_name,
    from_pulumi,
    load_stack,
    load_yaml,
    parse_config,
    read_stack_values,
    stack_file,
    stack_flags,
)
from lab.config.machines import (
    Airgap,
    Distribution,
    HostKeyPolicy,
    KubeadmAirgap,
    Nfs,
    Node,
    Registry,
    Role,
    SkipStep,
    Ssh,
)
from lab.config.messages import (
    ConfigError,
)
from lab.config.workload import (
    SWEEP_PARAMETERS,
    Backend,
    Compression,
    GangScheduler,
    Model,
    Observability,
    Placement,
    Range,
    Scheduling,
    Sweep,
    SweepStrategy,
    Trainer,
)
from lab.paths import (
    STACKS_DIR,
)

__all__ = [
    "BUILD_NAMESPACE_SUFFIX",
    "CLUSTER_NETWORKS",
    "DERIVED_NAMESPACE_SUFFIXES",
    "DNS_LABEL_MAX",
    "EPHEMERAL_PORTS",
    "EXPORTERS_NAMESPACE_SUFFIX",
    "GPU_NAMESPACE_SUFFIX",
    "KNOWN_PATCHES",
    "KUBELET_PORT",
    "MAX_NODE_GPUS",
    "MONITORING_NAMESPACE_SUFFIX",
    "NFS_PORT_NUMBER",
    "PROJECT",
    "STACKS_DIR",
    "SWEEP_PARAMETERS",
    "VXLAN_PORT",
    "Airgap",
    "Backend",
    "Compression",
    "ConfigError",
    "Distribution",
    "GangScheduler",
    "HostKeyPolicy",
    "KubeadmAirgap",
    "LabConfig",
    "Model",
    "Nfs",
    "Node",
    "Observability",
    "Placement",
    "Range",
    "Registry",
    "Role",
    "Scheduling",
    "SkipStep",
    "Ssh",
    "Sweep",
    "SweepStrategy",
    "Trainer",
    "all_stacks",
    "check_stack_name",
    "cluster_ports",
    "from_pulumi",
    "load_stack",
    "load_yaml",
    "parse_config",
    "read_stack_values",
    "stack_file",
    "stack_flags",
]
