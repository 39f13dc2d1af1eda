"""The try's own Prometheus: Debian's `prometheus` (2.42 on Debian 12, from scripts/apt-packages.txt)
run as a plain process on the operator's machine with a scrape configuration the lab writes: `labctl
try` points it at the ranks on its test machines. Its configuration is checked with the package's
own `promtool check config` before it starts, and it is asked over HTTP as any Prometheus is
(lab.remote.prometheus). The node exporters start and stop as it does.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lab.files import write_file
from lab.remote.prometheus import HttpPrometheus, PrometheusError

PROMETHEUS = "prometheus"
PROMTOOL = "promtool"
READY_TIMEOUT_S = 30


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
    "LocalPrometheus",
    "await_answer",
    "check_config",
    "missing",
    "scrape_config",
    "start_logged",
    "stop_process",
    "write_config",
]
