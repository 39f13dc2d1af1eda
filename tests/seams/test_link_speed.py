"""The Network dashboard's Link speed panel against a real node exporter on this machine's own links.

The exporter serves `/sys/class/net/<device>/speed` times 125000 as `node_network_speed_bytes`,
and a device whose driver does not know its speed reads `-1` there: it is served as `-125000`
unless the exporter runs with `--collector.netclass.ignore-invalid-speed`, off by default
(node_exporter v1.12.1 `collector/netclass_linux.go`, lines 34 and 122-126; Debian's 1.5.0 the
same). A virtual machine's network card often reads `-1`; the panel must show only known speeds.
"""

from __future__ import annotations

import time
from pathlib import Path

from lab.cli.try_local.local_prometheus import (
    LocalPrometheus,
    await_answer,
    free_port,
    scrape_config,
    start_logged,
    stop_process,
    write_config,
)
from lab.cli.try_local.node_exporter import NODE_EXPORTER
from lab.cluster.observability import dashboard
from lab.config.monitoring import NODES_JOB

SCRAPED_WITHIN_S = 120  # Prometheus hands new targets to its scrapers every 5 s; more when busy


def link_speed_query() -> str:
    (panel,) = [p for p in dashboard("network")["panels"] if p["title"] == "Link speed"]
    (target,) = panel["targets"]
    return str(target["expr"])


def test_link_speed_shows_known_speeds_only(prometheus: str, node_exporter: str, tmp_path: Path) -> None:
    target = f"127.0.0.1:{free_port()}"
    log = tmp_path / "node-exporter.log"
    exporter = start_logged(
        [
            NODE_EXPORTER,
            f"--web.listen-address={target}",
            "--collector.disable-defaults",
            "--collector.netclass",
        ],
        log,
    )
    (tmp_path / "data").mkdir()
    config = write_config(tmp_path / "prometheus.yml", scrape_config({NODES_JOB: {target: "here"}}, 1))
    server = LocalPrometheus(config, tmp_path / "data", log=tmp_path / "prometheus.log")
    try:
        await_answer(exporter, f"http://{target}/metrics", NODE_EXPORTER, log)
        server.start()
        deadline = time.monotonic() + SCRAPED_WITHIN_S
        while not server.api.query(f'up{{job="{NODES_JOB}"}} == 1') and time.monotonic() < deadline:
            time.sleep(0.5)
        at = time.time()  # both asked of the same scrape: links come and go (other tests' veths)
        scraped = server.api.query(f'up{{job="{NODES_JOB}"}} == 1', at)
        served = {s.labels["device"]: s.value for s in server.api.query("node_network_speed_bytes", at)}
        shown = {s.labels["device"]: s.value for s in server.api.query(link_speed_query(), at)}
    finally:
        server.stop()
        stop_process(exporter)
    assert scraped, f"Prometheus did not scrape the exporter within {SCRAPED_WITHIN_S} s"
    # A link of unknown speed is served negative; the panel shows every other link but loopback.
    assert shown == {d: v for d, v in served.items() if d != "lo" and v > 0}, (served, shown)
