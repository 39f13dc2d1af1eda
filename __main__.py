"""The K8sCIFAR lab: two machines to a trained CIFAR-10 model in one `pulumi up`.

Reads the stack configuration and composes the lab's named parts; each part lives in `lab/`.
"""

import pulumi

from lab import access, config
from lab.bootstrap.resource import kubernetes_provider
from lab.cluster.build_context import build_context
from lab.cluster.component import Cluster

lab = config.from_pulumi()
if lab.batch_note:
    pulumi.log.info(lab.batch_note)
# Packed now, before any host is touched: a build context the cluster cannot take stops here.
context = build_context()

# Hosts: Ansible turns the machines into a cluster, or the stack names one that is there; its
# kubeconfig builds the Kubernetes provider.
kubeconfig = access.kubeconfig(lab, pulumi.get_stack())
pulumi.export("kubeconfig", kubeconfig)

# Cluster: everything inside Kubernetes, declared through that provider. Machines that skip the
# Kubernetes install have no cluster, and an empty kubeconfig would send the provider to the
# operator's default one, so nothing is declared there.
if lab.installs_kubernetes:
    provider = kubernetes_provider(kubeconfig, pulumi.get_stack())
    cluster = Cluster("lab", lab, provider, context, kubeconfig)
    for name, value in cluster.outputs.exports().items():
        pulumi.export(name, value)
    # `pulumi up` returns once every rank trains; this follows the run to its end.
    pulumi.export("wait", f"labctl wait --stack {pulumi.get_stack()}")
    if lab.installs_monitoring:
        # Grafana through a port-forward, and where its password is (never printed by it).
        pulumi.export("dashboard", f"labctl dashboard --stack {pulumi.get_stack()}")

pulumi.export("nodes", {n.name: {"address": n.address, "role": n.role, "gpus": n.gpus} for n in lab.nodes})
pulumi.export("registry", lab.registry_endpoint)
