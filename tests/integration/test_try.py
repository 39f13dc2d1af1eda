"""`labctl try` end to end on its own test machines: machines, bootstrap, DDP across three of them
(more than the two of the reference lab: what a lab grown by a node meets) watched by a real
Prometheus on this machine, results and plots, validation, teardown; every query of the Training
dashboard answered from what that Prometheus scraped, and every query of the Network dashboard
from what it scraped of each machine's node exporter; and a Ctrl-C, SIGTERM or SIGHUP after the
machines are up leaves nothing."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from lab import testbed
from lab.cli.try_local import STACK, layout
from lab.cli.try_local.local_prometheus import LocalPrometheus, write_config
from lab.cli.try_local.metrics import SCRAPE_INTERVAL_S
from lab.cluster.observability import dashboard
from lab.paths import STATE_DIR
from lab.remote.prometheus import Series
from lab.testbed import processes
from lab.testbed.network import GUEST_LINK

# Bounds for a run that hangs, not for speed: a try says it takes 2.5 to 5.5 minutes on 2 cores,
# and on a machine busy with other work it takes longer still; its teardown after a stop signal
# waits on every machine's shutdown. The clock starts with the test, not while `turn` waits for
# other runs to release the machines.
RUN_TIMEOUT_S = 900
TEARDOWN_TIMEOUT_S = 300
pytestmark = pytest.mark.timeout(RUN_TIMEOUT_S + TEARDOWN_TIMEOUT_S + 60, func_only=True)
# The end-to-end run's machines: 2.7 minutes on an idle 2-core machine, a base tree made first.
MACHINES = 3


@pytest.fixture(scope="module")
def turn(root: None) -> Iterator[None]:
    """The integration tests' lock (the try's own `exclusive()` sees that this process holds it)."""
    with testbed.exclusive():
        if testbed.leftovers(layout()):
            testbed.down(layout())
        yield


def _start(out: Path, *options: str) -> subprocess.Popen[str]:
    """`labctl try` in a session of its own, as a terminal runs it (Ctrl-C reaches the whole group)."""
    return subprocess.Popen(
        [sys.executable, "-m", "lab.cli", "try", "--generated", "--epochs", "2", "--out", str(out), *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=os.environ | {"COLUMNS": "200", "TERM": "dumb"},
        start_new_session=True,
    )


def _ssh_masters() -> set[int]:
    """ssh connection masters (Ansible's ControlPersist): ssh renames each `ssh: SOCKET [mux]`."""
    return {
        pid
        for pid in map(int, (p.name for p in Path("/proc").glob("[0-9]*")))
        if " ".join(processes.command_line(pid)).startswith("ssh: ")
        and "[mux]" in " ".join(processes.command_line(pid))
    }


@dataclass(frozen=True)
class Before:
    """What was there before a run, others' (ssh connection masters, work folders of a run that
    was killed): a run may leave none of these."""

    masters: set[int]
    work_folders: set[Path]

    @classmethod
    def now(cls) -> Before:
        return cls(_ssh_masters(), set(Path(tempfile.gettempdir()).glob("k8scifar-try-*")))


def _nothing_left(before: Before) -> None:
    """No machine, namespace, bridge or veth, state folder, work folder or process of the run."""
    assert testbed.leftovers(layout()) == []
    assert not (STATE_DIR / STACK).exists()
    assert not layout().state.exists()
    assert Before.now().work_folders - before.work_folders == set()
    # No trainer, torchrun or playbook of the run: they name its work folder or state.
    addresses = [m.address for m in layout(MACHINES).machines]
    stray = [
        pid
        for pid in map(int, (p.name for p in Path("/proc").glob("[0-9]*")))
        if any(
            mark in " ".join(processes.command_line(pid))
            for mark in ("k8scifar-try-", str(STATE_DIR / STACK), *addresses)
        )
    ]
    assert stray == [], [processes.command_line(pid) for pid in stray]
    # No login to a machine kept open by an ssh connection master.
    assert _ssh_masters() - before.masters == set(), "an ssh connection master outlived the run"


def dashboard_queries(name: str) -> dict[str, str]:
    """Every PromQL query of the shipped dashboard `name`, by its panel's title."""
    return {
        f"{panel['title']} [{index}]": target["expr"]
        for panel in dashboard(name)["panels"]
        for index, target in enumerate(panel["targets"])
    }


def series_per_query(kept: Path, work: Path, queries: dict[str, str]) -> dict[str, list[Series]]:
    """The series each query returns over the last hour, as Grafana asks (a range query), of the
    database a try's Prometheus kept, served again by Prometheus itself (scraping nothing)."""
    data = work / "prometheus"
    shutil.copytree(kept, data)
    config = write_config(work / "prometheus.yml", {"global": {"scrape_interval": "15s"}})
    server = LocalPrometheus(config, data, log=work / "prometheus.log")
    server.start()
    # A rank of a short try may be scraped only a few times, its last two while it waits with its
    # final figures (`train --metrics-linger`); its series go stale one interval after the last
    # scrape, and a coarser step than that could step over every instant a rate is defined.
    step_s = SCRAPE_INTERVAL_S / 2
    try:
        end = time.time()
        return {name: server.api.query_range(expr, end - 3600, end, step_s) for name, expr in queries.items()}
    finally:
        server.stop()


def unserved(found: dict[str, list[Series]], machines: set[str]) -> dict[str, list[dict[str, str]]]:
    """The Network queries that lack a series of some machine's link, or return one without the
    labels their panels' legend shows (`{{node}} {{device}}`): the labels they returned instead."""
    return {
        name: [s.labels for s in series]
        for name, series in found.items()
        if {s.labels.get("node") for s in series if s.labels.get("device") == GUEST_LINK} != machines
        or not all(s.labels.get("node") and s.labels.get("device") for s in series)
    }


def test_try_trains_across_three_machines_and_removes_them(turn: None, tmp_path: Path) -> None:
    before = Before.now()
    proc = _start(tmp_path / "results", "--machines", str(MACHINES))
    try:
        out, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)  # its teardown runs; what it said so far is the clue
        out, _ = proc.communicate(timeout=TEARDOWN_TIMEOUT_S)
        pytest.fail(f"labctl try did not end within {RUN_TIMEOUT_S} s:\n{out}")
    assert proc.returncode == 0, out
    # Said up front: what it does not cover and how long it takes; the data said plainly.
    assert "Not covered here: Kubernetes" in out and "minutes on 2 cores" in out
    assert "NOT real CIFAR-10: a generated CIFAR-format set" in out
    epochs = [line for line in out.splitlines() if line.strip().startswith("epoch ")]
    assert len(epochs) == 2 and all("img/s" in e and "eta" in e and "test" in e for e in epochs), out
    (run,) = (tmp_path / "results").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["world_size"] == MACHINES and summary["epochs"] == 2
    ranks = ", ".join(f"rank {rank} on try-node{rank + 1}" for rank in range(MACHINES))
    assert f"3/5 training: DDP, {ranks}," in out, out
    assert {"curves.png", "metrics.jsonl", "validation.txt", "bootstrap.log"} <= {
        p.name for p in run.iterdir()
    }
    assert not (run / "checkpoints").exists()
    report = (run / "validation.txt").read_text()
    assert "PASS" in report and "FAIL" not in report and "ERROR" not in report, report
    assert f"try-node{MACHINES} (" in report.splitlines()[0], report  # every machine validated
    # Each skip reason once (the stack skips the Kubernetes install: many checks, one reason).
    assert report.count("kubernetesInstall is skipped in this stack") == 1, report
    # The bootstrap: a line per play and machine (and each note once), not one per task; every
    # task's line is in the run folder's bootstrap.log.
    bootstrap = out.split("2/5 bootstrap", 1)[1].split("  done in", 1)[0].splitlines()[1:]
    assert 0 < len(bootstrap) <= 10 * MACHINES and not any(line.startswith("PLAY") for line in bootstrap), out
    assert all(f"try-node{n}:" in "".join(bootstrap) for n in range(1, MACHINES + 1)), out
    log = (run / "bootstrap.log").read_text()
    assert log.count("RECAP ") == MACHINES and len(log.splitlines()) > 4 * len(bootstrap), log
    # Prometheus on this machine scraped every rank as they trained, and said so at the end: each
    # rank's final figures, its last epoch among them (a finished rank waits for its last scrapes).
    asked = out.split("asked of Prometheus on this machine", 1)[1].splitlines()[1 : MACHINES + 2]
    for rank, line in enumerate(asked[:MACHINES]):
        assert line.strip().startswith(f"rank {rank} on try-node{rank + 1}: step "), out
        assert f", epoch {summary['epochs']}, " in line, out
        assert " img/s, waiting for peers " in line and "% of step time" in line, out
    assert " samples in " in asked[MACHINES] and " successful scrapes" in asked[MACHINES], out
    # Every query of the Training dashboard returns a series per rank from what it scraped.
    assert (run / "prometheus.yml").is_file()
    found = series_per_query(run / "prometheus", tmp_path / "again", dashboard_queries("training"))
    counts = {name: len(series) for name, series in found.items()}
    assert len(counts) >= 9 and [name for name, count in counts.items() if count < MACHINES] == [], counts
    # Every query of the Network dashboard returns each machine's link, from its node exporter.
    network = series_per_query(run / "prometheus", tmp_path / "network", dashboard_queries("network"))
    lacking = unserved(network, {machine.name for machine in layout(MACHINES).machines})
    assert len(network) >= 3 and lacking == {}, lacking
    _nothing_left(before)


@pytest.mark.parametrize(
    ("stop", "group", "said"),
    [
        (signal.SIGINT, True, "interrupted"),  # Ctrl-C: the terminal signals the whole group
        (signal.SIGTERM, False, "stopped by SIGTERM"),  # `kill PID`, CI cancelling a job
        (signal.SIGHUP, True, "stopped by SIGHUP"),  # the terminal closed under the whole group
    ],
    ids=["Ctrl-C to its group", "SIGTERM to labctl", "SIGHUP to its group"],
)
def test_a_stop_signal_during_the_bootstrap_leaves_nothing(
    turn: None, tmp_path: Path, stop: signal.Signals, group: bool, said: str
) -> None:
    """Stopped once the machines are up and Ansible works on them, by whatever a terminal, CI or
    `timeout` sends: machines, namespaces, bridge and veths, state, work folder, Ansible and its
    ssh connection masters all go, and the exit status is the signal's."""
    before = Before.now()
    proc = _start(tmp_path / "results")
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "2/5 bootstrap" in line:
            break
    else:
        pytest.fail("labctl try ended before the bootstrap:\n" + "".join(seen))
    deadline = time.monotonic() + 60  # until Ansible holds a connection to a machine
    while not _ssh_masters() - before.masters and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _ssh_masters() - before.masters, "the bootstrap opened no ssh connection to stop"
    if group:
        os.killpg(proc.pid, stop)
    else:
        proc.send_signal(stop)
    out, _ = proc.communicate(timeout=TEARDOWN_TIMEOUT_S)
    assert proc.returncode == 128 + stop, "".join(seen) + out
    assert "teardown" in out and f"labctl: {said}" in out, out
    _nothing_left(before)
