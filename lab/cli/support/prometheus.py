"""Asking a Prometheus for the ranks' live figures, and a Prometheus of its own for `labctl try`.

Prometheus' HTTP API (prometheus/prometheus web/api/v1/api.go, docs/querying/api.md): `GET
/api/v1/query?query=Q[&time=T]` answers `{"status": "success", "data": {"resultType": "vector",
"result": [{"metric": {labels}, "value": [T, "V"]}]}}`; `/api/v1/query_range?query=Q&start=S&end=E&step=D`
answers a `matrix`, each series with `values`; an error is `{"status": "error", "errorType", "error"}`.
Values are text ("NaN" included). Standard library only: `labctl status` uses it, and labctl stays
light.

`LocalPrometheus` is Debian's `prometheus` (2.42 on Debian 12, from scripts/apt-packages.txt) run
as a plain process on the operator's machine with a scrape configuration the lab writes: `labctl
try` points it at the ranks on its test machines. Its configuration is checked with the package's
own `promtool check config` before it starts.
"""

from __future__ import annotations

import json
import math
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lab.files import write_file

# The ranks' series `status` and `try` show (trainer/pod/telemetry.py SERIES).
LIVE_SERIES = ("trainer_step", "trainer_epoch", "trainer_train_loss", "trainer_images_per_second")
TIMEOUT_S = 10
PROMETHEUS = "prometheus"
PROMTOOL = "promtool"
READY_TIMEOUT_S = 30


class PrometheusError(RuntimeError):
    """Prometheus could not be asked, or refused the query; the message says which."""


@dataclass(frozen=True)
class Series:
    labels: dict[str, str]
    value: float  # an instant query's; the last of a range query's


@dataclass
class RankFigures:
    """One rank's live figures, as Prometheus last scraped them."""

    rank: str
    where: str  # the pod, else the scraped address
    values: dict[str, float] = field(default_factory=dict)


def parse(body: bytes | str) -> list[Series]:
    """The series of a query answer (vector, or matrix with each series' last value)."""
    try:
        answer = json.loads(body)
    except ValueError:
        raise PrometheusError(f"the answer is not Prometheus' JSON: {str(body)[:80]!r}") from None
    if not isinstance(answer, dict) or answer.get("status") != "success":
        error = answer.get("error", "no error given") if isinstance(answer, dict) else "not an object"
        raise PrometheusError(f"Prometheus refused the query: {error}")
    found = []
    for item in answer["data"]["result"]:
        point = item["value"] if "value" in item else item["values"][-1]
        found.append(Series(dict(item["metric"]), float(point[1])))
    return found


def live_query(run: str | None = None) -> str:
    """The instant query for LIVE_SERIES, of one run when named."""
    names = "|".join(LIVE_SERIES)
    run_label = f',run="{run}"' if run else ""
    return f'{{__name__=~"{names}"{run_label}}}'


def last_values_query(name: str, run: str, window_s: int) -> str:
    """The last value series `name` of `run` had within `window_s` seconds: after a run has ended
    its series are stale (Prometheus marks them so when a scrape fails), but a range keeps their
    samples. `*_over_time` drops the metric's name, so each name is asked on its own."""
    return f'last_over_time({name}{{run="{run}"}}[{window_s}s])'


def rank_figures(series: Iterable[Series]) -> list[RankFigures]:
    """The series grouped by rank, in rank order."""
    ranks: dict[str, RankFigures] = {}
    for s in series:
        rank = s.labels.get("rank", "?")
        where = s.labels.get("pod") or s.labels.get("node") or s.labels.get("instance", "-")
        figures = ranks.setdefault(rank, RankFigures(rank, where))
        name = s.labels.get("__name__")
        if name:
            figures.values[name] = s.value
    return sorted(ranks.values(), key=lambda r: (len(r.rank), r.rank))


def number(value: float | None, digits: int = 0) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:,.{digits}f}"


def describe(figures: RankFigures) -> str:
    """`step 16, epoch 2, train loss 1.932, 850 img/s`."""
    v = figures.values.get
    return (
        f"step {number(v('trainer_step'))}, epoch {number(v('trainer_epoch'))},"
        f" train loss {number(v('trainer_train_loss'), 3)}, {number(v('trainer_images_per_second'))} img/s"
    )


@dataclass(frozen=True)
class HttpPrometheus:
    """A Prometheus this machine reaches over HTTP (its own, or one through a port-forward)."""

    url: str  # http://HOST:PORT, no trailing slash

    @property
    def where(self) -> str:
        return self.url

    def get(self, api: str, params: Mapping[str, str]) -> bytes:
        address = f"{self.url.rstrip('/')}/api/v1/{api}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(address, timeout=TIMEOUT_S) as response:
                return response.read()
        except urllib.error.HTTPError as err:
            # Prometheus answers a bad query 400 or 422 with its JSON error: say what it said.
            return err.read()
        except (OSError, urllib.error.URLError) as err:
            reason = getattr(err, "reason", None) or err
            raise PrometheusError(f"Prometheus at {self.url} is not reachable ({reason})") from None

    def query(self, promql: str, at: float | None = None) -> list[Series]:
        params = {"query": promql} | ({"time": f"{at:.3f}"} if at is not None else {})
        return parse(self.get("query", params))

    def query_range(self, promql: str, start: float, end: float, step_s: float) -> list[Series]:
        params = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step_s}"}
        return parse(self.get("query_range", params))

    def last_values(self, run: str, window_s: int) -> list[Series]:
        """LIVE_SERIES of `run` as last scraped within `window_s` seconds, each with its name."""
        found = []
        for name in LIVE_SERIES:
            for s in self.query(last_values_query(name, run, window_s)):
                found.append(Series(s.labels | {"__name__": name}, s.value))
        return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def scrape_config(jobs: Mapping[str, Mapping[str, str]], interval_s: int) -> dict[str, Any]:
    """A Prometheus configuration with a job per entry of `jobs` (job name -> its targets, each
    `address:port` -> node name, kept as the `node` label), every target scraped every
    `interval_s` seconds."""
    return {
        "global": {"scrape_interval": f"{interval_s}s", "evaluation_interval": f"{interval_s}s"},
        "scrape_configs": [
            {
                "job_name": job,
                "scrape_timeout": f"{interval_s}s",
                "static_configs": [
                    {"targets": [address], "labels": {"node": node}} for address, node in targets.items()
                ],
            }
            for job, targets in jobs.items()
        ],
    }


def check_config(path: Path, syntax_only: bool = False) -> None:
    """`promtool check config PATH` (with --syntax-only: no file it names must exist here)."""
    command = [PROMTOOL, "check", "config", *(["--syntax-only"] if syntax_only else []), str(path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        text = (done.stdout + done.stderr).strip().splitlines()
        raise PrometheusError(f"promtool finds {path} invalid: {text[-1] if text else 'no output'}")


def missing() -> list[str]:
    """The tools of Debian's `prometheus` package that this machine lacks."""
    return [tool for tool in (PROMETHEUS, PROMTOOL) if shutil.which(tool) is None]


@dataclass
class LocalPrometheus:
    """Prometheus on this machine, scraping `config` into `data`, its API on 127.0.0.1:`port`."""

    config: Path
    data: Path
    port: int = field(default_factory=free_port)
    log: Path | None = None
    process: subprocess.Popen[bytes] | None = None

    @property
    def api(self) -> HttpPrometheus:
        return HttpPrometheus(f"http://127.0.0.1:{self.port}")

    def command(self) -> list[str]:
        return [
            PROMETHEUS,
            f"--config.file={self.config}",
            f"--storage.tsdb.path={self.data}",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]

    def start(self) -> None:
        """Start it and wait until its API answers (`/-/ready`)."""
        log = self.log or self.data.with_suffix(".log")
        self.process = start_logged(self.command(), log)
        try:
            await_answer(self.process, f"{self.api.url}/-/ready", PROMETHEUS, log)
        except PrometheusError:
            self.stop()
            raise

    def stop(self) -> None:
        """SIGTERM, which closes its database cleanly; SIGKILL if it lingers (safe to call twice)."""
        stop_process(self.process)


def start_logged(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    """`command` started with its output into `log`."""
    with open(log, "wb") as out:  # the child holds its own copy
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)


def await_answer(process: subprocess.Popen[bytes], url: str, what: str, log: Path) -> None:
    """Wait until `url` answers 200, or say why not: `process` exited, or the time ran out."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise PrometheusError(f"{what} exited ({process.returncode}) as it started: {last_log_line(log)}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise PrometheusError(f"{what} did not answer within {READY_TIMEOUT_S} s: {last_log_line(log)}")


def last_log_line(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no log"
    return lines[-1] if lines else "no log"


def stop_process(process: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM, SIGKILL if it lingers (safe to call twice, or before a start)."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def write_config(path: Path, config: Mapping[str, Any]) -> Path:
    write_file(path, yaml.safe_dump(dict(config), sort_keys=False), 0o644)
    return path


__all__ = [
    "LIVE_SERIES",
    "HttpPrometheus",
    "LocalPrometheus",
    "PrometheusError",
    "RankFigures",
    "Series",
    "await_answer",
    "check_config",
    "describe",
    "last_values_query",
    "live_query",
    "missing",
    "parse",
    "rank_figures",
    "scrape_config",
    "start_logged",
    "stop_process",
    "write_config",
]
