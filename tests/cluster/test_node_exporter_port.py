"""The node exporter's host port is one fact, `observability.nodeExporterPort`: the chart's listen
address, container port and Service, and Prometheus' scrape of every node, all follow it, so a node
that already runs an exporter on 9100 (Ubuntu's `prometheus-node-exporter`) takes the lab's too.

The chart reads `service.port` for `--web.listen-address=[$(HOST_IP)]:PORT`, the container port and
the probes, and `service.targetPort` for its Service (prometheus-community/helm-charts
charts/prometheus-node-exporter 4.56.1 templates/daemonset.yaml, values.yaml).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from lab.cluster.observability import NODE_EXPORTER, dashboard_files
from lab.config import ConfigError, parse_config, read_stack_values, stack_file
from lab.config.facts import NODE_EXPORTER_PORT
from lab.config.monitoring import NODES_JOB, PROMETHEUS
from tests.support.program import run_program

STACK = "example-cpu"
MOVED = 9101


def _values(**observability: Any) -> dict[str, Any]:
    return {**read_stack_values(stack_file(STACK)), "observability": observability}


def _port_of(job: dict[str, Any]) -> int:
    (relabel,) = [r for r in job["relabel_configs"] if r.get("target_label") == "__address__"]
    return int(relabel["replacement"].rsplit(":", 1)[1])


def exporter_ports(values: dict[str, Any]) -> tuple[int, int, int]:
    """(the chart's listen port, its Service's target port, the port Prometheus scrapes each node on)."""
    run = run_program(STACK, values)
    releases = {r.inputs.get("name"): r.inputs["values"] for r in run.helm_releases()}
    service = releases[NODE_EXPORTER]["service"]
    jobs = yaml.safe_load(releases[PROMETHEUS]["extraScrapeConfigs"])
    (nodes,) = [j for j in jobs if j["job_name"] == NODES_JOB]
    return service["port"], service["targetPort"], _port_of(nodes)


def test_the_default_is_the_charts_port() -> None:
    assert exporter_ports(_values()) == (NODE_EXPORTER_PORT,) * 3 == (9100,) * 3


def test_the_exporter_and_its_scrape_follow_the_stack() -> None:
    assert exporter_ports(_values(nodeExporterPort=MOVED)) == (MOVED,) * 3


def test_no_dashboard_names_the_port() -> None:
    """The dashboards select the nodes' job by name, never an address with the port."""
    for name, path in dashboard_files().items():
        assert not re.search(rf"\b{NODE_EXPORTER_PORT}\b", path.read_text()), name


@pytest.mark.parametrize("port", [80, 40000, 9464])
def test_a_port_that_cannot_be_the_exporters_is_refused(port: int) -> None:
    """Below 1024, inside the collectives' ephemeral range, or the ranks' own metrics port."""
    with pytest.raises(ConfigError, match="nodeExporterPort"):
        parse_config(_values(nodeExporterPort=port))
