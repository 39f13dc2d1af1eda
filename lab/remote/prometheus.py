"""Asking a Prometheus for the ranks' live figures: one this machine reaches over HTTP (`labctl
status --prometheus URL`, or the one `labctl try` runs), or the lab's own through the API server's
service proxy, by the server's kubectl over SSH (no port-forward, nothing exposed).

Prometheus' HTTP API (prometheus/prometheus web/api/v1/api.go, docs/querying/api.md): `GET
/api/v1/query?query=Q[&time=T]` answers `{"status": "success", "data": {"resultType": "vector",
"result": [{"metric": {labels}, "value": [T, "V"]}]}}`; `/api/v1/query_range?query=Q&start=S&end=E&step=D`
answers a `matrix`, each series with `values`; an error is `{"status": "error", "errorType", "error"}`.
Values are text ("NaN" included). HTTP with the standard library only: `labctl status` uses it, and
labctl stays light.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lab.config import LabConfig, monitoring
from lab.remote.server_cluster import KubectlFailed, server_kubectl

# The ranks' series `status` and `try` show (trainer/pod/telemetry.py SERIES).
LIVE_SERIES = ("trainer_step", "trainer_epoch", "trainer_train_loss", "trainer_images_per_second")
TIMEOUT_S = 10


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


@dataclass(frozen=True)
class ProxiedPrometheus:
    """The lab's Prometheus, through `kubectl get --raw` on the server and the API server's proxy."""

    cfg: LabConfig
    stack: str
    stacks_dir: Path

    @property
    def where(self) -> str:
        return (
            f"{monitoring.PROMETHEUS_SERVICE} in {monitoring.monitoring_namespace(self.cfg)},"
            f" through the API server on {self.cfg.server.name}"
        )

    def query(self, promql: str) -> list[Series]:
        path = monitoring.prometheus_api_path(self.cfg, "query", {"query": promql})
        try:
            return parse(server_kubectl(self.cfg, self.stack, self.stacks_dir, "get", "--raw", path))
        except KubectlFailed as err:
            raise PrometheusError(f"Prometheus is not reachable ({err.last})") from None


__all__ = [
    "LIVE_SERIES",
    "HttpPrometheus",
    "PrometheusError",
    "ProxiedPrometheus",
    "RankFigures",
    "Series",
    "describe",
    "last_values_query",
    "live_query",
    "parse",
    "rank_figures",
]
