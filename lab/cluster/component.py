"""Everything inside the lab's Kubernetes cluster, declared through the provider the host bootstrap builds.

`Cluster` composes the named parts in dependency order: namespaces, GPU support, gang scheduler,
NFS storage, registry, image build, dataset, network policies, the monitoring stack, the DDP
training run and the optional sweep. The image build and the device plugin live in namespaces of their own
(lab.cluster.namespace).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from lab.cluster.build_context import BuildContext
from lab.cluster.dataset import declare_dataset
from lab.cluster.gang import declare_gang
from lab.cluster.gpu import declare_gpu_support
from lab.cluster.image import declare_image
from lab.cluster.namespace import declare_namespaces
from lab.cluster.network_policy import declare_network_policies
from lab.cluster.observability import declare_observability
from lab.cluster.registry import declare_registry
from lab.cluster.scope import Scope
from lab.cluster.storage import RUNS, declare_storage
from lab.cluster.sweep import declare_sweep
from lab.cluster.training import RUN_ANNOTATION, declare_training
from lab.config import LabConfig
from lab.config.monitoring import GRAFANA_PASSWORD_OUTPUT

SWEEP_RESULTS = "sweepResults"


@dataclass(frozen=True)
class ClusterOutputs:
    """What the stack exports about the cluster, read from the objects that were created: the image
    the build pushed (by digest), the run the StatefulSet carries, the NFS export its results go to."""

    image: pulumi.Output[str]
    run: pulumi.Output[str]
    results: pulumi.Output[str]
    follow: pulumi.Output[str]
    sweep_results: pulumi.Output[str] | None
    # Grafana's admin password, a secret output, where the lab has the monitoring stack.
    grafana_password: pulumi.Output[str] | None = None

    def exports(self) -> dict[str, pulumi.Output[str]]:
        """The outputs by the names the stack exports them under (a sweep's and Grafana's only
        where the lab has them)."""
        named = {"image": self.image, "run": self.run, "results": self.results, "follow": self.follow}
        if self.sweep_results is not None:
            named[SWEEP_RESULTS] = self.sweep_results
        if self.grafana_password is not None:
            named[GRAFANA_PASSWORD_OUTPUT] = pulumi.Output.secret(self.grafana_password)
        return named


class Cluster(pulumi.ComponentResource):
    """The lab's in-cluster objects; `outputs` says where the image, results and logs are."""

    def __init__(
        self,
        name: str,
        lab: LabConfig,
        provider: k8s.Provider,
        context: BuildContext,
        kubeconfig: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("k8scifar:cluster:Cluster", name, None, opts)
        namespaces = declare_namespaces(lab, provider, self)
        scope = Scope(lab, provider, self, namespaces.lab.metadata.name, kubeconfig)
        build_scope = scope.within(namespaces.build.metadata.name)
        gpu_scope = scope.within(namespaces.gpu.metadata.name) if namespaces.gpu else None
        gpu = declare_gpu_support(gpu_scope) if gpu_scope else []
        gang = declare_gang(scope)
        # Kueue's pod and Job webhooks fail closed on every pod of the lab's namespace: its
        # workloads are declared once Kueue serves (lab.cluster.gang).
        workloads = scope.after(*gang.serving) if gang else scope
        storage = declare_storage(scope)
        registry = declare_registry(workloads)
        image = declare_image(build_scope, registry, context)
        dataset = declare_dataset(workloads, storage, image)
        declare_network_policies(scope, build_scope, gpu_scope)
        observability = declare_observability(scope, gpu)
        training = declare_training(workloads, storage, image, dataset, gang)
        sweep = declare_sweep(workloads, storage, image, dataset, training.statefulset, gang)
        runs = storage.location(RUNS)
        ranks = training.statefulset.metadata
        run = ranks.annotations.apply(lambda annotations: annotations[RUN_ANNOTATION])
        self.outputs = ClusterOutputs(
            image=image.reference,
            run=run,
            results=pulumi.Output.concat(runs, "/", run),
            follow=pulumi.Output.concat("kubectl -n ", ranks.namespace, " logs -f ", ranks.name, "-0"),
            sweep_results=pulumi.Output.concat(runs, "/", sweep.job.metadata.name) if sweep else None,
            grafana_password=observability.grafana_password if observability else None,
        )
        self.register_outputs(self.outputs.exports())
