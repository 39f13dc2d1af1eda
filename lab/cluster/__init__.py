"""Everything inside the lab's Kubernetes cluster, declared through the provider the host bootstrap builds.

`Cluster` composes the named parts in dependency order: namespaces, GPU support, gang scheduler,
NFS storage, registry, image build, dataset, network policies, the DDP training run and the
optional sweep. The image build and the device plugin live in namespaces of their own
(lab.cluster.namespace).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from lab.build_context import BuildContext
from lab.cluster.dataset import declare_dataset
from lab.cluster.gang import declare_gang
from lab.cluster.gpu import declare_gpu_support
from lab.cluster.image import declare_image
from lab.cluster.namespace import declare_namespaces
from lab.cluster.network_policy import declare_network_policies
from lab.cluster.registry import declare_registry
from lab.cluster.scope import Scope
from lab.cluster.storage import RUNS, declare_storage, export_path
from lab.cluster.sweep import declare_sweep
from lab.cluster.training import declare_training
from lab.config import LabConfig


@dataclass(frozen=True)
class ClusterOutputs:
    """What the stack exports about the cluster: where things are and how to follow them."""

    image: pulumi.Output[str]
    run_name: str
    results: str
    follow: str
    sweep_results: str | None


class Cluster(pulumi.ComponentResource):
    """The lab's in-cluster objects; `outputs` says where the image, results and logs are."""

    def __init__(
        self,
        name: str,
        lab: LabConfig,
        provider: k8s.Provider,
        context: BuildContext,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("k8scifar:cluster:Cluster", name, None, opts)
        namespaces = declare_namespaces(lab, provider, self)
        scope = Scope(lab, provider, self, namespaces.lab.metadata.name)
        build_scope = scope.within(namespaces.build.metadata.name)
        gpu_scope = scope.within(namespaces.gpu.metadata.name) if namespaces.gpu else None
        if gpu_scope:
            declare_gpu_support(gpu_scope)
        gang = declare_gang(scope)
        storage = declare_storage(scope)
        registry = declare_registry(scope)
        image = declare_image(build_scope, registry, context)
        dataset = declare_dataset(scope, storage, image)
        declare_network_policies(scope, build_scope, gpu_scope)
        training = declare_training(scope, storage, image, dataset, gang)
        sweep = declare_sweep(scope, storage, image, dataset, training.statefulset, gang)
        share = f"{lab.nfs_server.address}:{export_path(scope, RUNS)}"
        self.outputs = ClusterOutputs(
            image=image.reference,
            run_name=training.run_name,
            results=f"{share}/{training.run_name}",
            follow=f"kubectl -n {lab.namespace} logs -f {training.pod_zero}",
            sweep_results=f"{share}/{sweep.name}" if sweep else None,
        )
        self.register_outputs({})
