"""Prometheus, Grafana and the exporters: the lab's training, GPUs, network and queue as live figures.

Four pinned official charts (lab.cluster.versions), each configured here, nothing else:

- `prometheus` (prometheus-community) with its server only: the chart's bundled alertmanager,
  kube-state-metrics, node exporter and pushgateway are off, and so is every scrape job of its
  default list (charts/prometheus/values.yaml `scrapeConfigs`, each with `enabled`). Its defaults
  scrape the API servers, kubelets and cAdvisor; kube-prometheus-stack's add the controller
  manager, scheduler, proxy and etcd, which k3s runs inside one process and does not serve on
  their own addresses (prometheus-community/helm-charts#1966). The lab scrapes only its own jobs
  (`scrape_jobs`): the ranks, dcgm-exporter, node exporter and Kueue.
- `prometheus-node-exporter` (prometheus-community): every node's interfaces (bytes/s against the
  link's speed, what `iftop` shows).
- `dcgm-exporter` (NVIDIA), GPU labs only: utilisation, memory, power and temperature per GPU,
  each series labelled with the pod and namespace holding the GPU (the exporter asks the
  kubelet's pod-resources socket; chart values `kubernetes.enablePodLabels`). It runs under the
  lab's `nvidia` RuntimeClass (chart value `runtimeClassName`): neither k3s nor the kubeadm role
  makes that runtime the default, and under runc the exporter finds neither the GPUs nor the
  driver's libraries and exits (NVIDIA/dcgm-exporter internal/pkg/dcgmprovider/dcgm.go).
- `grafana` (grafana-community, where Grafana's chart moved in 2026): the dashboards in
  lab/cluster/dashboards/, provisioned from those files, and Prometheus as its data source. Its
  admin password is a Pulumi secret the program draws once (lab.cluster.generated_secret), handed to the
  chart through a Secret of the lab's (chart values `admin.existingSecret`), never through the
  release's values, and exported as the secret stack output `grafanaAdminPassword`.

Monitoring never gates training. Every release is installed with `skipAwait`: pulumi-kubernetes
otherwise runs Helm's install with `Wait` for up to 300 s (provider/pkg/provider/helm_release.go,
`client.Wait = !newRelease.SkipAwait`, `defaultTimeoutSeconds`) and fails the release when its
pods are not ready by then, and one failed step makes the engine start no other
(pulumi pkg/resource/deploy/step_executor.go `cancelDueToError`): a crash-looping exporter would
keep the dataset Job and the training StatefulSet from ever being created. Nothing that trains
depends on a release of this module (tests/seams/test_monitoring_awaits.py); a pod of the stack
that does not start is `labctl status`'s and `kubectl`'s to show.

Prometheus and Grafana run in `<namespace>-monitoring` at Pod Security `restricted`, like the
lab's own namespace; both exporters need the host (its network namespace, /proc and /sys, the
kubelet's socket), so they run in `<namespace>-exporters` at `privileged` with nothing else, as
the device plugin does (lab.cluster.namespace). Every container has requests and limits; their
sum on the server node is held to `BUDGET` (docs/observability.md).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from lab.cluster import training
from lab.cluster.gang import KUEUE_NAMESPACE
from lab.cluster.generated_secret import GeneratedSecret
from lab.cluster.namespace import lab_namespace
from lab.cluster.pods import GPU_NODE_LABEL, GPU_RUNTIME_CLASS, GPU_TOLERATION
from lab.cluster.scope import Scope
from lab.cluster.security import PRIVILEGED, RESTRICTED, Size, container_security
from lab.cluster.versions import (
    DCGM_EXPORTER_CHART,
    DCGM_EXPORTER_REPOSITORY,
    DCGM_EXPORTER_VERSION,
    GRAFANA_CHART,
    GRAFANA_VERSION,
    NODE_EXPORTER_CHART,
    NODE_EXPORTER_VERSION,
    PROMETHEUS_CHART,
    PROMETHEUS_COMMUNITY_REPOSITORY,
    PROMETHEUS_VERSION,
)
from lab.config import GangScheduler, LabConfig
from lab.config.monitoring import (
    ADMIN_PASSWORD_KEY,
    ADMIN_USER_KEY,
    DASHBOARD_FOLDER,
    GRAFANA,
    GRAFANA_ADMIN_SECRET,
    GRAFANA_ADMIN_USER,
    NODES_JOB,
    PROMETHEUS,
    RANKS_JOB,
    exporters_namespace,
    monitoring_namespace,
    prometheus_url,
)

APP = "prometheus"
# Release names of the exporters (Prometheus' and Grafana's are lab.config.monitoring's).
NODE_EXPORTER = "node-exporter"
DCGM_EXPORTER = "dcgm-exporter"
COMPONENT = "observability"
DASHBOARDS = Path(__file__).with_name("dashboards")
NAME_LABEL = "app.kubernetes.io/name"
PROMETHEUS_POD_LABELS = {NAME_LABEL: "prometheus", "app.kubernetes.io/component": "server"}
NODE_EXPORTER_POD_LABELS = {NAME_LABEL: "prometheus-node-exporter"}
DCGM_EXPORTER_PORT = 9400  # NVIDIA/dcgm-exporter deployment/values.yaml service.port
# Kueue's controller serves /metrics over HTTPS on 8443 to callers allowed `get` on the
# non-resource URL /metrics (config.kueue.x-k8s.io metrics.bindAddress, lab.cluster.gang), which
# the prometheus chart's ClusterRole grants its server.
KUEUE_METRICS_PORT = 8443
KUEUE_POD_LABELS = {"control-plane": "controller-manager"}
SCRAPE_INTERVAL = "15s"
RETENTION = "7d"
RETENTION_SIZE = "1GB"
STORAGE_LIMIT = "2Gi"  # the emptyDir holding the TSDB: above RETENTION_SIZE plus the write-ahead log
# The chart's own scrape jobs (charts/prometheus/values.yaml, `scrapeConfigs`), every one off.
CHART_SCRAPE_JOBS = (
    "prometheus",
    "kubernetes-api-servers",
    "kubernetes-nodes",
    "kubernetes-nodes-cadvisor",
    "kubernetes-service-endpoints",
    "kubernetes-service-endpoints-slow",
    "prometheus-pushgateway",
    "kubernetes-services",
    "kubernetes-pods",
    "kubernetes-pods-slow",
)

# Requests and limits of every container; what lands on the server node must fit BUDGET.
SIZES = {
    "prometheus": Size(cpu="100m", memory="256Mi", cpu_limit="500m", memory_limit="768Mi"),
    "config-reload": Size(cpu="10m", memory="16Mi", cpu_limit="50m", memory_limit="32Mi"),
    "grafana": Size(cpu="50m", memory="128Mi", cpu_limit="250m", memory_limit="256Mi"),
    "node-exporter": Size(cpu="10m", memory="24Mi", cpu_limit="100m", memory_limit="64Mi"),
    "dcgm-exporter": Size(cpu="100m", memory="128Mi", cpu_limit="200m", memory_limit="512Mi"),
}
# The whole stack's limits on the server node, which runs all of it on a one-node lab: at most
# 1.2 CPU and 1.75 GiB (docs/observability.md).
BUDGET = {"cpu": "1200m", "memory": "1792Mi"}


@dataclass(frozen=True)
class Observability:
    monitoring: k8s.core.v1.Namespace
    exporters: k8s.core.v1.Namespace
    releases: list[k8s.helm.v3.Release]
    grafana_password: pulumi.Output[str]  # secret


def _pod_keep(namespace: str, labels: dict[str, str]) -> list[dict[str, Any]]:
    """Relabel rules that keep the pods of `namespace` carrying `labels`."""
    rules = [{"source_labels": ["__meta_kubernetes_namespace"], "regex": namespace, "action": "keep"}]
    for key, value in labels.items():
        meta = "__meta_kubernetes_pod_label_" + "".join(c if c.isalnum() else "_" for c in key)
        rules.append({"source_labels": [meta], "regex": value, "action": "keep"})
    return rules


def _pod_job(name: str, namespace: str, labels: dict[str, str], port: int, **extra: Any) -> dict[str, Any]:
    """A job scraping `port` on every matching pod, whatever ports the pod declares: host-network
    ranks declare none (lab.cluster.training._ports). Targets carry their pod and node."""
    return {
        "job_name": name,
        "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [namespace]}}],
        "relabel_configs": [
            *_pod_keep(namespace, labels),
            # One target per pod: pod discovery yields one per declared port, or one without any.
            {"source_labels": ["__meta_kubernetes_pod_container_init"], "regex": "true", "action": "drop"},
            {
                "source_labels": ["__meta_kubernetes_pod_ip"],
                "target_label": "__address__",
                "replacement": f"$1:{port}",
            },
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
        ],
        **extra,
    }


def scrape_jobs(lab: LabConfig, selector: dict[str, str]) -> list[dict[str, Any]]:
    """Prometheus' scrape jobs: the ranks (by the StatefulSet's pod selector), the exporters, Kueue."""
    exporters = exporters_namespace(lab)
    jobs = [
        _pod_job(RANKS_JOB, lab.namespace, selector, lab.observability.metrics_port),
        _pod_job(NODES_JOB, exporters, NODE_EXPORTER_POD_LABELS, lab.observability.node_exporter_port),
    ]
    if lab.has_gpus:
        jobs.append(_pod_job("gpus", exporters, {NAME_LABEL: "dcgm-exporter"}, DCGM_EXPORTER_PORT))
    if lab.gang_scheduler is GangScheduler.KUEUE:
        account = "/var/run/secrets/kubernetes.io/serviceaccount"
        jobs.append(
            _pod_job(
                "kueue",
                KUEUE_NAMESPACE,
                KUEUE_POD_LABELS,
                KUEUE_METRICS_PORT,
                scheme="https",
                # The controller's certificate is self-signed for its Service, not the pod's address.
                tls_config={"insecure_skip_verify": True},
                authorization={"credentials_file": f"{account}/token"},
            )
        )
    return jobs


def _restricted_pod() -> dict[str, Any]:
    return {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}


def prometheus_values(lab: LabConfig, selector: dict[str, str]) -> dict[str, Any]:
    off = {"enabled": False}
    return {
        "alertmanager": off,
        "kube-state-metrics": off,
        "prometheus-node-exporter": off,
        "prometheus-pushgateway": off,
        "scrapeConfigs": {job: off for job in CHART_SCRAPE_JOBS},
        "extraScrapeConfigs": yaml.safe_dump(scrape_jobs(lab, selector)),
        "server": {
            "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
            "retention": RETENTION,
            "retentionSize": RETENTION_SIZE,
            "persistentVolume": off,
            "emptyDir": {"sizeLimit": STORAGE_LIMIT},
            "resources": SIZES["prometheus"].resources(),
            "securityContext": {
                **_restricted_pod(),
                "runAsUser": 65534,
                "runAsGroup": 65534,
                "fsGroup": 65534,
            },
            "containerSecurityContext": container_security(),
        },
        "configmapReload": {
            "prometheus": {
                "resources": SIZES["config-reload"].resources(),
                "containerSecurityContext": container_security(),
            }
        },
    }


def dashboard_files() -> dict[str, Path]:
    return {path.stem: path for path in sorted(DASHBOARDS.glob("*.json"))}


def grafana_values(lab: LabConfig) -> dict[str, Any]:
    return {
        # The admin user and password from the lab's Secret: the chart then makes no password of
        # its own (templates/_config.tpl skips `admin-password` once `admin.existingSecret` is set).
        "admin": {
            "existingSecret": GRAFANA_ADMIN_SECRET,
            "userKey": ADMIN_USER_KEY,
            "passwordKey": ADMIN_PASSWORD_KEY,
        },
        "resources": SIZES["grafana"].resources(),
        "securityContext": {**_restricted_pod(), "runAsUser": 472, "runAsGroup": 472, "fsGroup": 472},
        "containerSecurityContext": container_security(),
        "testFramework": {"enabled": False},
        "persistence": {"enabled": False},
        "datasources": {
            "datasources.yaml": {
                "apiVersion": 1,
                "datasources": [
                    {
                        "name": "Prometheus",
                        "uid": "prometheus",
                        "type": "prometheus",
                        "url": prometheus_url(lab),
                    }
                ],
            }
        },
        "dashboardProviders": {
            "dashboardproviders.yaml": {
                "apiVersion": 1,
                "providers": [
                    {
                        "name": DASHBOARD_FOLDER,
                        "folder": DASHBOARD_FOLDER,
                        "type": "file",
                        "options": {"path": f"/var/lib/grafana/dashboards/{DASHBOARD_FOLDER}"},
                    }
                ],
            }
        },
        "dashboards": {
            DASHBOARD_FOLDER: {name: {"json": path.read_text()} for name, path in dashboard_files().items()}
        },
    }


def node_exporter_values(lab: LabConfig) -> dict[str, Any]:
    port = lab.observability.node_exporter_port
    return {
        "resources": SIZES["node-exporter"].resources(),
        "tolerations": [{"operator": "Exists"}],
        # The chart listens on `service.port` on the node's network, and names it as the container
        # port the probes use; its Service targets `service.targetPort`
        # (charts/prometheus-node-exporter templates/daemonset.yaml `--web.listen-address`,
        # values.yaml): both move, so a node whose 9100 is taken can run the lab's exporter.
        "service": {"port": port, "targetPort": port},
    }


def dcgm_exporter_values() -> dict[str, Any]:
    return {
        # The toolkit's hook, which hands the exporter the GPUs and the driver's libraries, runs
        # only under the nvidia runtime (NVIDIA/dcgm-exporter deployment/values.yaml
        # `runtimeClassName`, read by templates/daemonset.yaml).
        "runtimeClassName": GPU_RUNTIME_CLASS,
        "resources": SIZES["dcgm-exporter"].resources(),
        "nodeSelector": {GPU_NODE_LABEL: "true"},
        "tolerations": [GPU_TOLERATION],
        "kubernetes": {"enablePodLabels": True},
        "serviceMonitor": {"enabled": False},
    }


def _release(
    scope: Scope,
    name: str,
    chart: str,
    version: str,
    values: dict[str, Any],
    repo: str | None = None,
    *depends_on: pulumi.Resource,
) -> k8s.helm.v3.Release:
    return k8s.helm.v3.Release(
        name,
        name=name,
        chart=chart,
        version=version,
        namespace=scope.namespace,
        repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=repo) if repo else None,
        values=values,
        # Created once Helm has created the chart's objects, ready or not (module docstring).
        skip_await=True,
        opts=scope.opts(*depends_on),
    )


def grafana_admin(scope: Scope) -> tuple[k8s.core.v1.Secret, pulumi.Output[str]]:
    """Grafana's admin password, drawn once and kept as a Pulumi secret, in the Secret the chart reads.

    pulumi-kubernetes keeps a Secret's `data` and `stringData` secret in the state whatever they
    hold; the value is secret already, so nothing derived from it is plain either.
    """
    password = GeneratedSecret(
        "grafana-admin-password", "grafana-admin", pulumi.ResourceOptions(parent=scope.parent)
    ).value
    kept: pulumi.Output[str] = pulumi.Output.secret(password)
    secret = k8s.core.v1.Secret(
        GRAFANA_ADMIN_SECRET,
        metadata=scope.metadata(GRAFANA_ADMIN_SECRET, GRAFANA, COMPONENT),
        type="Opaque",
        string_data={ADMIN_USER_KEY: GRAFANA_ADMIN_USER, ADMIN_PASSWORD_KEY: kept},
        opts=scope.opts(),
    )
    return secret, kept


def declare_observability(scope: Scope, gpu: Sequence[pulumi.Resource] = ()) -> Observability | None:
    """The stack above on a lab that installs its monitoring (`observability.enabled`, the default,
    and no `provides.monitoring`); nothing otherwise.
    `gpu`: the GPU support objects (the `nvidia` RuntimeClass among them) dcgm-exporter's pods need."""
    lab = scope.lab
    if not lab.installs_monitoring:
        return None
    monitoring = lab_namespace(
        "monitoring-namespace", lab, monitoring_namespace(lab), RESTRICTED, scope.provider, scope.parent
    )
    exporters = lab_namespace(
        "exporters-namespace", lab, exporters_namespace(lab), PRIVILEGED, scope.provider, scope.parent
    )
    inside = scope.within(monitoring.metadata.name).after(monitoring)
    host = scope.within(exporters.metadata.name).after(exporters)
    selector = scope.selector(training.APP, training.COMPONENT)
    admin, password = grafana_admin(inside)
    releases = [
        _release(
            inside,
            PROMETHEUS,
            PROMETHEUS_CHART,
            PROMETHEUS_VERSION,
            prometheus_values(lab, selector),
            PROMETHEUS_COMMUNITY_REPOSITORY,
        ),
        _release(inside, GRAFANA, GRAFANA_CHART, GRAFANA_VERSION, grafana_values(lab), None, admin),
        _release(
            host,
            NODE_EXPORTER,
            NODE_EXPORTER_CHART,
            NODE_EXPORTER_VERSION,
            node_exporter_values(lab),
            PROMETHEUS_COMMUNITY_REPOSITORY,
        ),
    ]
    if lab.has_gpus:
        releases.append(
            _release(
                host,
                DCGM_EXPORTER,
                DCGM_EXPORTER_CHART,
                DCGM_EXPORTER_VERSION,
                dcgm_exporter_values(),
                DCGM_EXPORTER_REPOSITORY,
                *gpu,
            )
        )
    return Observability(monitoring, exporters, releases, password)


def metrics_ingress(scope: Scope) -> dict[str, Any]:
    """The NetworkPolicy rule that lets Prometheus, and nothing else, reach the ranks' metrics port:
    the lab's, or every pod of the namespace the cluster's own runs in (`provides.monitoring`),
    whose pods' labels the lab does not know."""
    provided = scope.lab.provides.monitoring
    name = provided.namespace if provided is not None else monitoring_namespace(scope.lab)
    namespace = {"matchLabels": {"kubernetes.io/metadata.name": name}}
    pods = {} if provided is not None else {"podSelector": {"matchLabels": PROMETHEUS_POD_LABELS}}
    return {
        "from": [{"namespaceSelector": namespace, **pods}],
        "ports": [{"protocol": "TCP", "port": scope.lab.observability.metrics_port}],
    }


def dashboard(name: str) -> dict[str, Any]:
    return json.loads(dashboard_files()[name].read_text())
