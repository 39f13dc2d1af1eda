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
from typing import Any

import pytest
import yaml

from lab.cluster.observability import (
    DCGM_EXPORTER_CHART,
    PROMETHEUS,
    PROMETHEUS_POD_LABELS,
    dashboard,
    dashboard_files,
)
from tests.program.harness import cluster_stacks, name_of, pod_labels, recorded
from tests.program.test_cluster_consistency import component
from trainer.telemetry import SERVED

# What each exporter serves that the dashboards use, from the exporters' own sources:
# NVIDIA/dcgm-exporter etc/default-counters.csv (the chart's default counters);
# prometheus/node_exporter collector/netdev_linux.go and collector/netclass_linux.go
# (node_network_<field>_total from /proc/net/dev, node_network_speed_bytes from /sys/class/net);
# kubernetes-sigs/kueue pkg/metrics/metrics.go (checked by its test/integration metrics lists).
EXPORTED = {
    "dcgm-exporter": {
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_GPU_TEMP",
    },
    "node-exporter": {
        "node_network_receive_bytes_total",
        "node_network_transmit_bytes_total",
        "node_network_speed_bytes",
    },
    "kueue": {"kueue_pending_workloads", "kueue_admitted_active_workloads"},
}
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


def test_the_check_catches_a_renamed_metric() -> None:
    queries = {"training/Loss": metric_names("rate(trainer_train_loss_total[2m]) / trainer_steps_total")}
    assert queries == {"training/Loss": {"trainer_train_loss_total", "trainer_steps_total"}}
    assert unserved(queries, all_served()) == ["training/Loss: trainer_train_loss_total"]


def _prometheus_values(run: Any) -> dict[str, Any]:
    (release,) = [
        r for r in run.helm_releases() if name_of(r) == PROMETHEUS or r.inputs.get("name") == PROMETHEUS
    ]
    return release.inputs["values"]


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
    values = _prometheus_values(run)
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
    from tests.program.harness import broken

    run = broken("example-gpu")
    values = _prometheus_values(run)
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
