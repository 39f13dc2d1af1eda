"""A rank's live figures, served over HTTP in Prometheus' text format while it trains.

Every series carries the labels `run`, `rank` and `model`, so a dashboard can tell ranks and runs
apart without knowing which pod served them. The names are in `SERIES`: the dashboards
(lab/cluster/dashboards) may only query those, and a test holds them to it.

Time per step is split where it can be measured from the host: `trainer_sync_wait_seconds_total`
is the time the ranks spend in the step's own all-reduce (the one that agrees on stopping), which
returns only once the slowest rank has arrived, so it grows when one rank lags the others. The
gradient all-reduce overlaps the backward pass inside DDP (torch/nn/parallel/distributed.py
buckets gradients and launches each bucket's all-reduce as soon as it is ready), so it cannot be
told apart from compute without a profiler: it counts in `trainer_compute_seconds_total`.

The server starts only with a port (`train --metrics-port`). Under torchrun each process of a
node listens on the port plus its `LOCAL_RANK` (torch/distributed/run.py sets it per worker), so
two ranks on one machine do not collide; a pod runs one worker, so a pod's rank listens on the
port itself.

A run can end between two scrapes, and a short one may have been scraped once or not at all (a
busy rank answers a scrape late, and Prometheus drops an answer later than its scrape timeout):
its last figures are then never stored, and a `rate` needs two samples. So with a linger
(`train --metrics-linger SECONDS`) a rank that has finished keeps serving until its endpoint has
been scraped FINAL_SCRAPES more times, or the linger is over. An idle rank answers at once, so
those scrapes are stored whatever the machine's load was while it trained.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from trainer import inputs
from trainer.errors import TrainerError

LABELS = ("run", "rank", "model")
# Scrapes of a finished rank's endpoint before it may exit: the two samples of its final figures
# that a `rate` over them needs.
FINAL_SCRAPES = 2
LOCAL_RANK = "LOCAL_RANK"

# name -> (kind, help). Counters get `_total` from prometheus_client in what it serves.
SERIES: dict[str, tuple[type, str]] = {
    "trainer_step": (Gauge, "optimizer steps the run has taken, resumed ones included"),
    "trainer_steps_planned": (Gauge, "optimizer steps the whole run takes"),
    "trainer_epoch": (Gauge, "epochs completed"),
    "trainer_epochs_planned": (Gauge, "epochs the whole run takes"),
    "trainer_train_loss": (Gauge, "mean train loss of the last completed epoch, over all ranks"),
    "trainer_test_accuracy": (Gauge, "test accuracy (0 to 1) of the last evaluation"),
    "trainer_images_per_second": (Gauge, "images/s in the last epoch (global batch, this rank's time)"),
    "trainer_steps": (Counter, "steps this process trained"),
    "trainer_step_seconds": (Counter, "wall-clock seconds of the steps this process trained"),
    "trainer_compute_seconds": (Counter, "step seconds outside the per-step all-reduce"),
    "trainer_sync_wait_seconds": (Counter, "step seconds in the per-step all-reduce, waiting for peers"),
    "trainer_restarts": (Gauge, "times the run resumed from a checkpoint"),
    "trainer_seconds_since_checkpoint": (Gauge, "seconds since the run last wrote a checkpoint"),
}
# What the endpoint serves, as Prometheus stores it (counters with `_total`).
SERVED = tuple(name + ("_total" if kind is Counter else "") for name, (kind, _) in SERIES.items())

T = TypeVar("T")


class MetricsPortError(TrainerError):
    """The metrics port cannot be listened on."""


class ScrapeCounter:
    """Counts the scrapes of a registry: each one collects every collector of it once."""

    def __init__(self) -> None:
        self.count = 0
        self.changed = threading.Condition()

    def collect(self) -> Iterable[Any]:
        with self.changed:
            self.count += 1
            self.changed.notify_all()
        return []

    def wait_for(self, more: int, seconds: float) -> bool:
        """Whether `more` scrapes came within `seconds` from now."""
        with self.changed:
            target = self.count + more
            return self.changed.wait_for(lambda: self.count >= target, timeout=seconds)


class RankMetrics:
    """One rank's series, in a registry of its own; `serve` puts them on an HTTP port."""

    def __init__(self, run: str, model: str, rank: int) -> None:
        self.registry = CollectorRegistry()
        self.scrapes = ScrapeCounter()
        self.registry.register(self.scrapes)
        self.port: int | None = None
        labels = {"run": run, "rank": str(rank), "model": model}
        self.series: dict[str, Any] = {
            name: kind(name, text, LABELS, registry=self.registry).labels(**labels)
            for name, (kind, text) in SERIES.items()
        }
        self.checkpointed_at: float | None = None
        self.series["trainer_seconds_since_checkpoint"].set_function(self._since_checkpoint)
        self.mark = time.monotonic()
        self.waited = 0.0

    def serve(self, port: int | None, env: Mapping[str, str]) -> int | None:
        """Listen on `port` plus this worker's LOCAL_RANK; None (nothing served) without a port."""
        if port is None:
            return None
        port += inputs.integer(env.get(LOCAL_RANK, "0") or "0")
        try:
            start_http_server(port, registry=self.registry)
        except OSError as err:
            raise MetricsPortError(
                f"cannot serve metrics on port {port} ({err.strerror or err}): choose a free"
                " --metrics-port (each local rank takes the port plus its LOCAL_RANK)"
            ) from None
        self.port = port
        return port

    def linger(self, seconds: float) -> None:
        """Serve the final figures until scraped FINAL_SCRAPES more times, at most `seconds`."""
        if self.port is None or seconds <= 0 or self.scrapes.wait_for(FINAL_SCRAPES, seconds):
            return
        print(
            f"warning: the metrics endpoint on port {self.port} was not scraped {FINAL_SCRAPES} times"
            f" within {seconds:g} s of the run's end: its last figures may be missing from Prometheus",
            flush=True,
        )

    def started(self, step: int, epoch: int, restarts: int, steps: int, epochs: int) -> None:
        """Where the run stands as this process begins to train (a resumed run carries on)."""
        for name, value in (
            ("trainer_step", step),
            ("trainer_epoch", epoch),
            ("trainer_restarts", restarts),
            ("trainer_steps_planned", steps),
            ("trainer_epochs_planned", epochs),
        ):
            self.series[name].set(value)
        self.mark, self.waited = time.monotonic(), 0.0

    def timed_wait(self, collective: Callable[[Any], T], value: Any) -> T:
        """Run the step's all-reduce and count its time as waiting."""
        began = time.monotonic()
        try:
            return collective(value)
        finally:
            self.waited += time.monotonic() - began

    def stepped(self, step: int) -> None:
        """A step is done: its time since the last mark, split into waiting and compute."""
        now = time.monotonic()
        seconds = now - self.mark
        self.series["trainer_step"].set(step)
        self.series["trainer_steps"].inc()
        self.series["trainer_step_seconds"].inc(seconds)
        self.series["trainer_sync_wait_seconds"].inc(self.waited)
        self.series["trainer_compute_seconds"].inc(max(seconds - self.waited, 0.0))
        self.mark, self.waited = now, 0.0

    def checkpointed(self) -> None:
        self.checkpointed_at = time.monotonic()

    def epoch_done(self, line: Mapping[str, Any]) -> None:
        """An epoch's line (trainer.records.metrics): its figures; evaluation and checkpoint time are not
        step time, so the next step is timed from here."""
        self.series["trainer_epoch"].set(line["epoch"])
        self.series["trainer_train_loss"].set(line["train_loss"])
        if "test_acc" in line:  # not with --no-epoch-eval
            self.series["trainer_test_accuracy"].set(line["test_acc"])
        self.series["trainer_images_per_second"].set(line["images_per_second"])
        self.mark, self.waited = time.monotonic(), 0.0

    def _since_checkpoint(self) -> float:
        # NaN until the first checkpoint: "no data" on a panel, never a made-up age.
        return float("nan") if self.checkpointed_at is None else time.monotonic() - self.checkpointed_at
