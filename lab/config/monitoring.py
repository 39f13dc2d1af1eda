"""Where the lab's monitoring stack is: namespaces, Services, ports and the Grafana admin Secret.

The program declares them (lab.cluster.observability); `labctl dashboard` and `labctl status`
reach them. Kept apart from the program so that `labctl` finds them without loading
pulumi_kubernetes.
"""

from __future__ import annotations

import urllib.parse

from lab.config import EXPORTERS_NAMESPACE_SUFFIX, MONITORING_NAMESPACE_SUFFIX, LabConfig, Node

# The node exporter's default port, the one `labctl try`'s exporters serve on; the cluster's
# takes `observability.nodeExporterPort` (lab.config.facts).
from lab.config.facts import NODE_EXPORTER_PORT as NODE_EXPORTER_PORT

# Release names are fixed, so the Services the charts name after them are known in advance.
PROMETHEUS = "prometheus"
GRAFANA = "grafana"
# charts/prometheus templates: the server's Service is `<release>-server`, port 80 to 9090.
PROMETHEUS_SERVICE = f"{PROMETHEUS}-server"
PROMETHEUS_SERVICE_PORT = 80
# charts/grafana templates/service.yaml: the Service is the release's full name, which is the
# release name when it holds the chart's name; values.yaml service.port 80 to targetPort 3000.
GRAFANA_SERVICE = GRAFANA
GRAFANA_SERVICE_PORT = 80
# The Secret holding Grafana's admin user and password (chart values `admin.existingSecret`,
# `admin.userKey`, `admin.passwordKey`; templates/_pod.tpl reads both keys from it).
GRAFANA_ADMIN_SECRET = "grafana-admin"
GRAFANA_ADMIN_USER = "admin"
ADMIN_USER_KEY = "admin-user"
ADMIN_PASSWORD_KEY = "admin-password"
# The secret stack output that holds the password (`pulumi stack output --show-secrets NAME`).
GRAFANA_PASSWORD_OUTPUT = "grafanaAdminPassword"
# Grafana's folder of the lab's dashboards (the chart's dashboard provider).
DASHBOARD_FOLDER = "k8scifar"
# Prometheus' scrape jobs of the ranks and of the nodes' exporters, in the cluster and in `labctl
# try`: the same names, so a query that picks a job means the same in both.
RANKS_JOB = "ranks"
NODES_JOB = "nodes"


def monitoring_namespace(lab: LabConfig) -> str:
    """Prometheus and Grafana (Pod Security `restricted`)."""
    return lab.namespace + MONITORING_NAMESPACE_SUFFIX


def exporters_namespace(lab: LabConfig) -> str:
    """The exporters that need the host (Pod Security `privileged`)."""
    return lab.namespace + EXPORTERS_NAMESPACE_SUFFIX


def prometheus_url(lab: LabConfig) -> str:
    """Prometheus' address inside the cluster: its Service's name in the monitoring namespace."""
    return f"http://{PROMETHEUS_SERVICE}.{monitoring_namespace(lab)}.svc.cluster.local"


def service_proxy_path(namespace: str, service: str, port: int, path: str) -> str:
    """`path` on a Service's port through the API server's service proxy
    (`/api/v1/namespaces/NS/services/[SCHEME:]NAME:PORT/proxy/PATH`, the `services/proxy`
    subresource), as `kubectl get --raw` asks for it: no port-forward, no Service exposed."""
    return f"/api/v1/namespaces/{namespace}/services/http:{service}:{port}/proxy/{path.lstrip('/')}"


def prometheus_api_path(lab: LabConfig, api: str, params: dict[str, str]) -> str:
    """Prometheus' HTTP API `api` (e.g. `query`) with `params`, through the API server's proxy."""
    path = f"api/v1/{api}?{urllib.parse.urlencode(params)}"
    return service_proxy_path(monitoring_namespace(lab), PROMETHEUS_SERVICE, PROMETHEUS_SERVICE_PORT, path)


def password_command(stack: str) -> str:
    """What prints Grafana's admin password: the stack's secret output, shown only when asked."""
    return f"pulumi stack output --stack {stack} --show-secrets {GRAFANA_PASSWORD_OUTPUT}"


def host_ports(lab: LabConfig, node: Node) -> dict[tuple[int, str], str]:
    """(port, protocol) -> purpose, for the ports the monitoring stack takes on `node`'s own network:
    the node exporter on every node (the chart runs it with hostNetwork and tolerates every taint),
    and, with ranks on the host network, each rank's metrics port (`P + LOCAL_RANK`) on the nodes
    that run ranks. Each purpose names the stack key that moves the port."""
    if not lab.observability.enabled:
        return {}
    ports = {(lab.observability.node_exporter_port, "tcp"): "node exporter, observability.nodeExporterPort"}
    runs_ranks = node.gpus > 0 if lab.has_gpus else True
    if lab.trainer.host_network and runs_ranks:
        first = lab.observability.metrics_port
        for port in range(first, first + lab.world.ranks_per_pod):
            ports[(port, "tcp")] = "rank metrics, observability.metricsPort"
    return ports
