"""The K8sCIFAR lab: two machines to a trained CIFAR-10 model in one `pulumi up`.

Reads the stack configuration and composes the lab's named parts; each part lives in `lab/`.
"""

import pulumi

from lab import config

lab = config.from_pulumi()

# Hosts: Ansible turns the machines into a cluster; its kubeconfig builds the Kubernetes provider.

# Cluster: everything inside Kubernetes, declared through that provider.

pulumi.export("nodes", {n.name: {"address": n.address, "role": n.role, "gpus": n.gpus} for n in lab.nodes})
pulumi.export("registry", lab.registry_endpoint)
