"""Each rank's metrics endpoint, scraped while two ranks train under torchrun, and read the way
Prometheus reads it (prometheus_client's parser follows the text exposition format)."""

from __future__ import annotations

import math
import signal
import socket
import threading
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.network import free_port
from tests.support.trainer_runs import ROOT, SMALL, read_json, run, start, torchrun, trainer, wait_for
from trainer.pod.telemetry import FINAL_SCRAPES, SERVED, RankMetrics


def consecutive_free_ports(count: int) -> int:
    """A port P such that P..P+count-1 are free now (each local rank takes P + LOCAL_RANK). P is
    the kernel's pick, not the first free one from a fixed start, which a test on the slow tier's
    other worker looking at the same moment would pick too."""
    for _ in range(100):
        with socket.socket() as a, socket.socket() as b:
            a.bind(("127.0.0.1", 0))
            base = a.getsockname()[1]
            try:
                b.bind(("127.0.0.1", base + count - 1))
            except (OSError, OverflowError):  # taken, or past 65535
                continue
            return base
    raise AssertionError(f"no {count} consecutive free ports in 100 of the kernel's picks")


def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> [(labels, value)], or {} while nothing listens."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return {}
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def value(samples: dict, name: str) -> float:
    (_labels, number) = samples[name][0]
    return number


# Each rank holds after step HELD_STEP until the test opens the gate: the test reads both
# endpoints mid-run however fast or slowly this machine trains.
HELD_STEP = 5
HOLD = """
import os, time
from pathlib import Path
from trainer.pod import telemetry
_stepped = telemetry.RankMetrics.stepped
def stepped(self, step):
    _stepped(self, step)
    while step == int(os.environ["HELD_STEP"]) and not Path(os.environ["GATE"]).exists():
        time.sleep(0.05)
telemetry.RankMetrics.stepped = stepped
"""


def test_each_rank_serves_its_figures_while_training(dataset: Path, tmp_path: Path, processes: list) -> None:
    port = consecutive_free_ports(2)
    command = torchrun(
        2, "train", "--data", dataset, "--runs", tmp_path, "--run-name", "watched", *SMALL,
        "--metrics-port", str(port), "--on-complete", "wait",
    )  # fmt: skip
    hooks, gate = tmp_path / "hooks", tmp_path / "gate"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(HOLD)
    variables = {"PYTHONPATH": f"{hooks}:{ROOT}", "HELD_STEP": str(HELD_STEP), "GATE": str(gate)}
    process = start(command, tmp_path / "log", **variables)
    processes.append(process)
    during: dict[int, dict] = {}

    def both_ranks_held() -> bool:
        for rank in (0, 1):
            samples = scrape(port + rank)
            if samples and value(samples, "trainer_step") == HELD_STEP:
                during[rank] = samples
        assert process.poll() is None, (tmp_path / "log").read_text()[-3000:]
        return len(during) == 2

    wait_for(both_ranks_held, "both ranks' endpoints mid-run")
    gate.touch()
    for rank, samples in during.items():
        assert 0 < value(samples, "trainer_step") < value(samples, "trainer_steps_planned")
        for name in SERVED:
            assert name in samples, f"rank {rank} does not serve {name}"
            (labels, _) = samples[name][0]
            assert labels == {"run": "watched", "rank": str(rank), "model": "airbench"}, labels
    run_dir = tmp_path / "watched"
    wait_for(lambda: (read_json(run_dir / "status.json") or {}).get("state") == "complete", "the run's end")
    final = read_json(run_dir / "status.json")
    for rank in (0, 1):
        samples = scrape(port + rank)
        assert value(samples, "trainer_step") == value(samples, "trainer_steps_planned") == 36
        assert value(samples, "trainer_epoch") == value(samples, "trainer_epochs_planned") == 3
        assert value(samples, "trainer_steps_total") == 36
        assert value(samples, "trainer_test_accuracy") == final["test_acc"]
        assert value(samples, "trainer_train_loss") == final["train_loss"]
        # The global batch over this rank's own epoch time: rank 0's is the one on record.
        speed = value(samples, "trainer_images_per_second")
        assert speed == final["images_per_second"] if rank == 0 else speed > 0
        assert value(samples, "trainer_restarts") == 0
        step, wait, compute = (
            value(samples, f"trainer_{name}_seconds_total") for name in ("step", "sync_wait", "compute")
        )
        assert wait > 0 and compute > 0 and math.isclose(wait + compute, step, rel_tol=1e-6)
        assert 0 <= value(samples, "trainer_seconds_since_checkpoint") < 120
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=25)


def test_a_port_out_of_range_is_refused_before_training(dataset: Path, tmp_path: Path) -> None:
    result = run(
        trainer("train", "--data", dataset, "--runs", tmp_path, "--run-name", "x", "--metrics-port", "70000")
    )
    assert result.returncode == 2
    assert "--metrics-port: must be a TCP port from 1 to 65535, got 70000" in result.stderr
    assert not (tmp_path / "x").exists()


def _lingering(metrics: RankMetrics, seconds: int) -> threading.Thread:
    thread = threading.Thread(target=metrics.linger, args=(seconds,), daemon=True)
    thread.start()
    return thread


def test_a_finished_rank_serves_until_scraped_twice_more() -> None:
    """A run may end between two scrapes: the rank stays until its final figures are scraped
    FINAL_SCRAPES times, however late those scrapes come, and no longer."""
    metrics = RankMetrics("lingering", "airbench", 0)
    port = metrics.serve(free_port(), {})
    assert port is not None and FINAL_SCRAPES == 2
    metrics.started(36, 3, 0, 36, 3)
    scrape(port)  # a scrape before the run's end does not count towards the final ones
    thread = _lingering(metrics, 120)
    assert value(scrape(port), "trainer_step") == 36
    thread.join(timeout=1)
    assert thread.is_alive(), "the rank left after one final scrape: a rate needs two samples"
    assert value(scrape(port), "trainer_step") == 36
    thread.join(timeout=10)
    assert not thread.is_alive(), "the rank stayed after its final scrapes"


def test_an_unscraped_rank_leaves_after_its_linger_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    metrics = RankMetrics("unwatched", "airbench", 1)
    port = metrics.serve(free_port(), {})
    metrics.linger(1)
    said = capsys.readouterr().out
    assert f"metrics endpoint on port {port} was not scraped 2 times within 1 s" in said, said


def test_without_a_port_or_a_linger_a_rank_leaves_at_once() -> None:
    unserved = RankMetrics("unserved", "airbench", 0)
    unserved.serve(None, {})
    served = RankMetrics("served", "airbench", 0)
    served.serve(free_port(), {})
    for metrics, seconds in ((unserved, 60), (served, 0)):
        thread = _lingering(metrics, seconds)
        thread.join(timeout=5)
        assert not thread.is_alive()
