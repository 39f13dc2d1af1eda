"""Prometheus' configuration as Prometheus' own tool reads it: the lab's scrape jobs (the chart's
`extraScrapeConfigs`, which the chart appends to the configuration it writes) and the one `labctl
try` runs its local Prometheus with, checked by `promtool check config` (Debian's `prometheus`
package, scripts/apt-packages.txt).

promtool is 2.42 here (Debian 12), the cluster's Prometheus 3.14 (lab.cluster.versions): the
fields the lab writes (`kubernetes_sd_configs`, `relabel_configs` with keep/drop/replace,
`authorization.credentials_file`, `tls_config`, `static_configs`) mean the same in both
(prometheus docs/configuration/configuration.md; 3.0's migration guide changes none of them).
The cluster's jobs name the service account's token, which exists only in the pod: those are
checked with `--syntax-only` (no file they name is read). Debian builds Prometheus without
Kubernetes discovery ("Kubernetes support has been completely removed", its NEWS.Debian for
1.5.0+ds-1), so its promtool refuses `kubernetes_sd_configs` as an unknown field: each job's
discovery block is swapped for an empty `static_configs` before the check, and everything else
(relabelling, scheme, TLS, authorization) is checked as written. The discovery block's own
fields are held to Prometheus' pod discovery by tests/seams/test_metrics_seams.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from lab.cli.try_local import layout
from lab.cli.try_local.local_prometheus import check_config, scrape_config, write_config
from lab.cli.try_local.metrics import SCRAPE_INTERVAL_S, exporters, jobs
from lab.config import load_stack
from lab.remote.prometheus import PrometheusError
from tests.support.program import cluster_stacks, recorded
from tests.support.program_objects import prometheus_values


@pytest.fixture(autouse=True)
def promtool() -> None:
    if shutil.which("promtool") is None:
        pytest.skip("promtool is missing: install Debian's `prometheus` (scripts/apt-packages.txt)")


def cluster_config(values: dict[str, Any]) -> dict[str, Any]:
    """What the chart writes for the lab's values, reduced to what the lab sets: its global
    settings and its jobs (every job of the chart's own list is off)."""
    return {
        "global": values["server"]["global"],
        "scrape_configs": yaml.safe_load(values["extraScrapeConfigs"]),
    }


def without_kubernetes_discovery(config: dict[str, Any]) -> dict[str, Any]:
    """`config` as a Prometheus built without Kubernetes discovery reads it (see above)."""
    jobs = []
    for job in config["scrape_configs"]:
        discovery = job.get("kubernetes_sd_configs")
        assert discovery, f"job {job['job_name']} discovers no pods"
        assert all(d["role"] == "pod" and d["namespaces"]["names"] for d in discovery), discovery
        jobs.append({k: v for k, v in job.items() if k != "kubernetes_sd_configs"} | {"static_configs": []})
    return config | {"scrape_configs": jobs}


@pytest.mark.parametrize("stack", cluster_stacks())
def test_the_cluster_scrape_jobs_pass_promtool(stack: str, tmp_path: Path) -> None:
    config = cluster_config(prometheus_values(recorded(stack)))
    names = [job["job_name"] for job in config["scrape_configs"]]
    assert names[:2] == ["ranks", "nodes"]
    checked = without_kubernetes_discovery(config)
    check_config(write_config(tmp_path / "prometheus.yml", checked), syntax_only=True)


def test_the_try_config_passes_promtool(tmp_path: Path) -> None:
    port = load_stack("testbed").observability.metrics_port
    found = jobs(layout(), port, exporters(layout(), tmp_path))
    assert found == {
        "ranks": {"10.77.2.11:9464": "try-node1", "10.77.2.12:9464": "try-node2"},
        "nodes": {"10.77.2.11:9100": "try-node1", "10.77.2.12:9100": "try-node2"},
    }
    check_config(write_config(tmp_path / "prometheus.yml", scrape_config(found, SCRAPE_INTERVAL_S)))


def test_promtool_refuses_what_prometheus_would(tmp_path: Path) -> None:
    """The checks above can fail: a relabelling action Prometheus does not know."""
    config = without_kubernetes_discovery(cluster_config(prometheus_values(recorded("example-gpu"))))
    config["scrape_configs"][0]["relabel_configs"][0]["action"] = "kepp"
    with pytest.raises(PrometheusError, match="kepp"):
        check_config(write_config(tmp_path / "prometheus.yml", config), syntax_only=True)
