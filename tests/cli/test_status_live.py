"""`labctl status` with the ranks' live figures from Prometheus: the lab's own asked through the
API server's service proxy by the server's kubectl, or any Prometheus named with --prometheus; and
one plain line when Prometheus cannot be asked or the lab has none.

The lab's Prometheus is answered from here (no cluster runs here; the SSH and kubectl path itself
is exercised by tests/cli/test_results.py); a real Prometheus (Debian's package) scrapes two
ranks' real endpoints (trainer.pod.telemetry) for --prometheus.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from lab.cli import main
from lab.cli.common.runsource import LocalRuns
from lab.cli.try_local.local_prometheus import (
    LocalPrometheus,
    check_config,
    free_port,
    scrape_config,
    write_config,
)
from lab.config import read_stack_values, stack_file
from lab.remote import pods, prometheus
from lab.remote.server_cluster import KubectlFailed
from tests.support.labctl import labctl, write_stack
from trainer.pod.telemetry import RankMetrics

RUN = "watched"


def _runs(root: Path) -> Path:
    (root / RUN).mkdir(parents=True)
    (root / RUN / "status.json").write_text(json.dumps({"state": "running", "epoch": 1, "epochs": 4}))
    return root


def _vector(*series: tuple[dict[str, str], float]) -> str:
    result = [{"metric": labels, "value": [1700000000.0, str(value)]} for labels, value in series]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})


@dataclass
class Server:
    """What the server's kubectl was asked, and what it answers (text, or an error to raise)."""

    calls: list[tuple[str, ...]] = field(default_factory=list)
    answer: str | Exception = ""


@pytest.fixture
def lab_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Server:
    """A stack's cluster listing no rank pods, its runs a local folder, its server's kubectl here."""
    server = Server()
    monkeypatch.setattr(pods, "kubectl_get", lambda *a: {"items": []})
    monkeypatch.setattr("lab.cli.status.runs_source", lambda args: LocalRuns(_runs(tmp_path / "runs")))

    def kubectl(cfg: Any, stack: str, stacks_dir: Any, *args: str) -> str:
        server.calls.append(args)
        if isinstance(server.answer, Exception):
            raise server.answer
        return server.answer

    monkeypatch.setattr(prometheus, "server_kubectl", kubectl)
    return server


def test_status_asks_the_lab_prometheus_through_the_api_server(
    lab_cluster: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    labels = {"run": RUN, "model": "airbench", "pod": "trainer-0"}
    lab_cluster.answer = _vector(
        ({**labels, "__name__": "trainer_step", "rank": "0"}, 12),
        ({**labels, "__name__": "trainer_images_per_second", "rank": "0"}, 2345.6),
        ({**labels, "__name__": "trainer_train_loss", "rank": "0"}, 1.25),
        ({**labels, "pod": "trainer-1", "__name__": "trainer_step", "rank": "1"}, 12),
    )
    assert main(["status", "--stack", "example-cpu"]) == 0
    out = capsys.readouterr().out
    ((verb, raw, path),) = lab_cluster.calls
    assert (verb, raw) == ("get", "--raw")
    # The API server's proxy to port 80 of prometheus-server in the monitoring namespace.
    assert path.startswith(
        "/api/v1/namespaces/k8scifar-monitoring/services/http:prometheus-server:80/proxy/api/v1/query?query="
    )
    assert "run%3D%22watched%22" in path and "trainer_images_per_second" in path
    # rich wraps a table's title to the table's width
    title = "live from Prometheus (prometheus-server in k8scifar-monitoring, through the API server on cpu-a)"
    assert title in " ".join(out.split())
    rows = [line.split() for line in out.splitlines() if "trainer-" in line]
    assert rows[0][:6] == ["│", "0", "│", "trainer-0", "│", "12"] and "2,346" in out and "1.250" in out
    assert rows[1][:4] == ["│", "1", "│", "trainer-1"]
    assert "run watched" in out  # the run's own table follows


def test_status_says_plainly_when_prometheus_cannot_be_asked(
    lab_cluster: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    gone = 'Error from server (NotFound): services "prometheus-server" not found'
    lab_cluster.answer = KubectlFailed("kubectl failed", gone)
    assert main(["status", "--stack", "example-cpu"]) == 0
    out = capsys.readouterr().out
    said = f"live figures: Prometheus is not reachable ({gone}); the figures below are from the run's files"
    assert said in " ".join(out.split())
    assert "run watched" in out


def test_status_of_a_lab_without_prometheus_says_so(
    lab_cluster: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = read_stack_values(stack_file("example-cpu")) | {"observability": {"enabled": False}}
    write_stack(tmp_path / "stacks", "quiet", values)
    assert main(["status", "--stack", "quiet", "--stacks-dir", str(tmp_path / "stacks")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "live figures: none, stack quiet has no Prometheus (k8scifar:observability.enabled" in out
    assert lab_cluster.calls == []  # nobody asked


def test_status_shows_what_a_real_prometheus_scraped_from_two_ranks(prometheus: str, tmp_path: Path) -> None:
    """Debian's Prometheus scrapes two ranks' endpoints as the trainer serves them; `status
    --prometheus` shows each rank's figures, and one line when that Prometheus is not there."""
    ranks = []
    for rank in (0, 1):
        metrics = RankMetrics(RUN, "airbench", rank)
        port = metrics.serve(free_port(), {})
        assert port is not None
        metrics.started(step=0, epoch=0, restarts=0, steps=100, epochs=4)
        ranks.append((metrics, port))
    config = write_config(
        tmp_path / "prometheus.yml",
        scrape_config(
            {"ranks": {f"127.0.0.1:{port}": f"node{rank}" for rank, (_, port) in enumerate(ranks)}}, 1
        ),
    )
    check_config(config)
    (tmp_path / "data").mkdir()
    server = LocalPrometheus(config, tmp_path / "data", log=tmp_path / "prometheus.log")
    server.start()
    try:
        for step in range(1, 6):
            for metrics, _ in ranks:
                metrics.stepped(step)
                line = {"epoch": 1, "train_loss": 2.5, "test_acc": 0.3, "images_per_second": 900.0}
                metrics.epoch_done(line)
        # Prometheus hands new targets to its scrapers every 5 s; a busy machine takes longer still.
        deadline = time.monotonic() + 120
        while len(server.api.query(f'trainer_step{{run="{RUN}"}}')) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        runs = _runs(tmp_path / "runs")
        result = labctl("status", "--runs-dir", runs, "--prometheus", server.api.url)
    finally:
        server.stop()
    assert result.code == 0, result.err
    assert f"live from Prometheus ({server.api.url}), run {RUN}" in result.out
    for rank in (0, 1):
        row = next(line.split("│") for line in result.out.splitlines() if f"node{rank}" in line)
        cells = [cell.strip() for cell in row[1:7]]
        assert cells == [str(rank), f"node{rank}", "5", "1", "2.500", "900"], row
    gone = labctl("status", "--runs-dir", runs, "--prometheus", server.api.url)
    assert gone.code == 0
    assert f"live figures: Prometheus at {server.api.url} is not reachable" in " ".join(gone.out.split())
