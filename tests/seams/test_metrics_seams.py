"""Where the ranks' metrics meet the monitoring stack: the port the trainer is told, the port the
NetworkPolicy opens, the pods and port Prometheus scrapes; and the metric names the dashboards'
PromQL asks for against the names their exporters serve.

Prometheus' relabelling (prometheus/prometheus model/relabel/relabel.go): `keep` keeps a target
whose source labels, joined by `;`, match the anchored regex; `replacement` `$1` is the first
group of the regex, `(.*)` by default. Pod discovery (discovery/kubernetes/pod.go) turns each pod
label into `__meta_kubernetes_pod_label_<name>`, every character outside [a-zA-Z0-9_] made `_`.
"""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import yaml

from lab.cluster.observability import (
    DCGM_EXPORTER_CHART,
    PROMETHEUS,
    PROMETHEUS_POD_LABELS,
    dashboard,
    dashboard_files,
    dcgm_exporter_values,
)
from lab.cluster.versions import DCGM_EXPORTER_VERSION, KUEUE_VERSION, NODE_EXPORTER_VERSION
from lab.config import load_stack
from lab.config.monitoring import prometheus_api_path
from tests.support.program import broken, cluster_stacks, name_of, pod_labels, recorded
from tests.support.program_objects import prometheus_values
from tests.support.rules.cluster_rules import component
from trainer.pod.telemetry import SERVED

# What each pinned exporter serves, read from its source at the pinned version (the file says
# where): dcgm-exporter's chart's default counter list, node_exporter's netdev and netclass
# collectors, Kueue's pkg/metrics/metrics.go.
EXPORTER_DATA = Path(__file__).parent / "data" / "exporter-metrics.yaml"
PINNED = {
    "dcgm-exporter": DCGM_EXPORTER_VERSION,
    "node-exporter": NODE_EXPORTER_VERSION,
    "kueue": KUEUE_VERSION,
}


def exported() -> dict[str, set[str]]:
    return {name: set(entry["names"]) for name, entry in yaml.safe_load(EXPORTER_DATA.read_text()).items()}


EXPORTED = exported()
PROMQL_WORDS = {"rate", "irate", "sum", "avg", "max", "min", "by", "without", "on", "ignoring", "increase"}
IDENTIFIER = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers outside `{...}` and `[...]`,
    not functions or keywords."""
    bare = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\"[^\"]*\"", " ", expr)
    names = set()
    for match in IDENTIFIER.finditer(bare):
        following = bare[match.end() :].lstrip()
        if match.group() not in PROMQL_WORDS and not following.startswith("("):
            names.add(match.group())
    return names


def unserved(names_by_panel: dict[str, set[str]], served: set[str]) -> list[str]:
    return sorted(f"{panel}: {name}" for panel, names in names_by_panel.items() for name in names - served)


def dashboard_queries() -> dict[str, set[str]]:
    found = {}
    for name in dashboard_files():
        for panel in dashboard(name)["panels"]:
            for target in panel["targets"]:
                found[f"{name}/{panel['title']}"] = metric_names(target["expr"])
    return found


def all_served() -> set[str]:
    return set(SERVED).union(*EXPORTED.values())


def test_every_dashboard_query_asks_for_a_served_metric() -> None:
    queries = dashboard_queries()
    assert set(dashboard_files()) == {"training", "gpus", "network", "queue"}
    assert all(queries.values()), "a query with no metric name"
    assert unserved(queries, all_served()) == []


def test_the_exporter_names_were_read_at_the_pinned_versions() -> None:
    """A chart bump fails here until the names are read again from the new version's source."""
    recorded = yaml.safe_load(EXPORTER_DATA.read_text())
    assert {name: entry["pinned"] for name, entry in recorded.items()} == PINNED


def test_dcgm_exporter_serves_the_chart_default_counters() -> None:
    """The recorded list is the chart's default: the lab's values replace neither the list
    (`customMetrics`) nor the file the exporter reads (`arguments`, the mounted ConfigMap)."""
    values = dcgm_exporter_values()
    assert not {"customMetrics", "arguments", "extraConfigMapVolumes", "extraVolumeMounts"} & set(values)


def test_the_check_catches_a_renamed_metric() -> None:
    queries = {"training/Loss": metric_names("rate(trainer_train_loss_total[2m]) / trainer_steps_total")}
    assert queries == {"training/Loss": {"trainer_train_loss_total", "trainer_steps_total"}}
    assert unserved(queries, all_served()) == ["training/Loss: trainer_train_loss_total"]


def _keeps(rules: list[dict[str, Any]], meta: dict[str, str]) -> str | None:
    """The target address Prometheus keeps for a pod with these meta labels, or None if dropped."""
    labels = dict(meta)
    for rule in rules:
        value = ";".join(labels.get(s, "") for s in rule.get("source_labels", []))
        match = re.fullmatch(rule.get("regex", "(.*)"), value)
        action = rule.get("action", "replace")
        if action == "keep" and not match:
            return None
        if action == "drop" and match:
            return None
        if action == "replace" and match:
            labels[rule["target_label"]] = match.expand(rule.get("replacement", "$1").replace("$1", r"\1"))
    return labels.get("__address__")


def _pod_meta(namespace: str, labels: dict[str, str]) -> dict[str, str]:
    meta = {"__meta_kubernetes_namespace": namespace, "__meta_kubernetes_pod_ip": "10.42.0.7"}
    for key, value in labels.items():
        meta["__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)] = value
    return meta


def port_problems(run: Any) -> list[str]:
    """The rank's --metrics-port, the container port, the policy's port and peer, and the scrape."""
    (sts,) = component(run, "training")
    (container,) = sts.inputs["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    port = int(args[args.index("--metrics-port") + 1])
    problems = []
    declared = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    if declared and declared.get("metrics") != port:
        problems.append(
            f"the container declares metrics port {declared.get('metrics')}, the rank serves {port}"
        )
    (policy,) = [p for p in run.of_kind("NetworkPolicy") if name_of(p) == "trainer-metrics"]
    spec = policy.inputs["spec"]
    ranks = pod_labels(sts)
    if any(ranks.get(k) != v for k, v in spec["podSelector"]["matchLabels"].items()):
        problems.append("the metrics policy does not select the ranks' pods")
    (rule,) = spec["ingress"]
    if [p["port"] for p in rule["ports"]] != [port]:
        problems.append(f"the policy opens {rule['ports']}, the rank serves {port}")
    (peer,) = rule["from"]
    if peer["podSelector"]["matchLabels"] != PROMETHEUS_POD_LABELS:
        problems.append(f"the policy admits {peer['podSelector']}, not the Prometheus server's pods")
    values = prometheus_values(run)
    jobs = {job["job_name"]: job for job in yaml.safe_load(values["extraScrapeConfigs"])}
    namespace = sts.inputs["metadata"]["namespace"]
    address = _keeps(jobs["ranks"]["relabel_configs"], _pod_meta(namespace, ranks))
    if address != f"10.42.0.7:{port}":
        problems.append(f"Prometheus scrapes a rank at {address}, the rank serves {port}")
    if _keeps(
        jobs["ranks"]["relabel_configs"], _pod_meta(namespace, {**ranks, "app.kubernetes.io/component": "x"})
    ):
        problems.append("Prometheus scrapes pods that are not ranks")
    return problems


@pytest.mark.parametrize("stack", cluster_stacks())
def test_prometheus_alone_reaches_the_port_each_rank_serves(stack: str) -> None:
    assert port_problems(recorded(stack)) == []


def test_the_port_check_catches_a_scrape_of_another_port() -> None:
    run = broken("example-gpu")
    values = prometheus_values(run)
    values["extraScrapeConfigs"] = values["extraScrapeConfigs"].replace(":9464", ":9465")
    assert port_problems(run) == ["Prometheus scrapes a rank at 10.42.0.7:9465, the rank serves 9464"]


def test_gpu_labs_install_dcgm_exporter_with_pod_labels() -> None:
    (release,) = [
        r for r in recorded("example-gpu").helm_releases() if r.inputs["chart"] == DCGM_EXPORTER_CHART
    ]
    assert release.inputs["values"]["kubernetes"]["enablePodLabels"] is True
    assert not [
        r for r in recorded("example-cpu").helm_releases() if r.inputs["chart"] == DCGM_EXPORTER_CHART
    ]


# charts/prometheus at 29.27.0 (Prometheus v3.14.0): templates/_helpers.tpl
# `prometheus.server.fullname` is `<release>-<server.name>` when the release's name holds the
# chart's ("prometheus"), `server.name` defaulting to "server" (values.yaml), unless
# `server.fullnameOverride`; templates/service.yaml serves port `server.service.servicePort`
# (values.yaml: 80), named `http`. A URL without a port is port 80 over http.
CHART_SERVER_NAME = "server"
CHART_SERVICE_PORT = 80


def prometheus_address(run: Any) -> tuple[str, int]:
    """Where the chart puts Prometheus' Service for the lab's release and values: (host, port)."""
    (release,) = [r for r in run.helm_releases() if r.inputs.get("name") == PROMETHEUS]
    server = release.inputs["values"]["server"]
    release_name, role = release.inputs["name"], server.get("name", CHART_SERVER_NAME)
    name = f"{release_name}-{role}" if "prometheus" in release_name else f"{release_name}-prometheus-{role}"
    name = server.get("fullnameOverride", name)
    port = server.get("service", {}).get("servicePort", CHART_SERVICE_PORT)
    return f"{name}.{release.inputs['namespace']}.svc.cluster.local", port


def datasource_problems(run: Any, lab: Any) -> list[str]:
    """Grafana's data source and `labctl status`' proxy path against the Service the chart makes."""
    host, port = prometheus_address(run)
    (grafana,) = [r for r in run.helm_releases() if r.inputs.get("name") == "grafana"]
    (source,) = grafana.inputs["values"]["datasources"]["datasources.yaml"]["datasources"]
    url = urllib.parse.urlsplit(source["url"])
    problems = []
    if (url.scheme, url.hostname, url.port or 80) != ("http", host, port):
        problems.append(f"Grafana asks {source['url']}, Prometheus is http://{host}:{port}")
    service, namespace = host.split(".")[:2]
    proxied = prometheus_api_path(lab, "query", {"query": "up"})
    if not proxied.startswith(f"/api/v1/namespaces/{namespace}/services/http:{service}:{port}/proxy/"):
        problems.append(f"labctl status asks {proxied}, Prometheus is {service}:{port} in {namespace}")
    return problems


@pytest.mark.parametrize("stack", cluster_stacks())
def test_grafana_and_status_ask_the_service_the_chart_makes(stack: str) -> None:
    assert datasource_problems(recorded(stack), load_stack(stack)) == []


def test_the_datasource_check_catches_another_port() -> None:
    run = broken("example-cpu")
    (release,) = [r for r in run.helm_releases() if r.inputs.get("name") == PROMETHEUS]
    release.inputs["values"]["server"]["service"] = {"servicePort": 9090}
    problems = datasource_problems(run, load_stack("example-cpu"))
    host = "prometheus-server.k8scifar-monitoring.svc.cluster.local"
    assert problems == [
        f"Grafana asks http://{host}, Prometheus is http://{host}:9090",
        "labctl status asks /api/v1/namespaces/k8scifar-monitoring/services/http:prometheus-server:80/proxy"
        "/api/v1/query?query=up, Prometheus is prometheus-server:9090 in k8scifar-monitoring",
    ]
