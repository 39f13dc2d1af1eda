"""Runs one of the lab's playbooks through ansible-runner and reports what happened.

Progress is printed as one line per task result (host, task, status) and a recap per host, so a
person can follow a bootstrap; a failure raises PlaybookError naming the host, the task and the
module's message. Values the playbook returns with `set_stats` come back in the result (the fact
cache is empty with ansible-core 2.19).

Secrets never reach ansible-runner's artifacts: env files are suppressed, secret variables travel
in a private file that is removed after the run, and the set_stats payload (which may hold the
kubeconfig) is taken out of the stats event before it is written to disk.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import ansible_runner

ANSIBLE_DIR = Path(__file__).resolve().parent.parent / "ansible"

# Events that end a task on one host, and the word shown for each.
_RESULT_EVENTS = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_unreachable": "unreachable",
    "runner_on_skipped": "skipped",
}


# Modules whose message is the point of the task (e.g. why a step is skipped): shown in progress.
_DEBUG_ACTIONS = {"debug", "ansible.builtin.debug"}


class PlaybookError(RuntimeError):
    """A playbook run that did not succeed; the message names host, task and the module's words."""

    def __init__(self, playbook: str, failures: list[Failure], status: str, output: str = "") -> None:
        self.playbook = playbook
        self.failures = failures
        self.status = status
        if failures:
            detail = "\n".join(f"  - {f}" for f in failures)
        else:
            tail = "\n".join(f"    {line}" for line in output.strip().splitlines()[-15:])
            detail = f"  - ansible-runner ended with status {status!r} before any task failed:\n{tail}"
        super().__init__(f"{playbook} failed:\n{detail}")


@dataclass(frozen=True)
class Failure:
    host: str
    task: str
    message: str

    def __str__(self) -> str:
        return f"host {self.host}, task {self.task!r}: {self.message}"


@dataclass
class PlaybookResult:
    """What a successful run did: per-host counts and the values set with `set_stats`."""

    playbook: str
    changed: dict[str, int] = field(default_factory=dict)
    ok: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def total_changed(self) -> int:
        return sum(self.changed.values())


def _message(result: Mapping[str, Any]) -> str:
    """The most telling words a failed module left behind: its message and a command's stderr."""
    words = [str(result[key]).strip() for key in ("msg", "reason", "stderr") if result.get(key)]
    if not words and result.get("stdout"):
        words.append(str(result["stdout"]).strip())
    return ": ".join(words) or "no message (run again with more verbosity to see why)"


class _Recorder:
    """Follows the event stream: prints progress, collects failures, counts and set_stats data."""

    def __init__(self, playbook: str, out: TextIO | None) -> None:
        self.result = PlaybookResult(playbook)
        self.failures: list[Failure] = []
        self.out = out

    def _say(self, line: str) -> None:
        if self.out is not None:
            print(line, file=self.out, flush=True)

    def __call__(self, event: dict[str, Any]) -> bool:
        kind = event.get("event", "")
        data = event.get("event_data", {})
        if kind == "playbook_on_play_start":
            self._say(f"PLAY {data.get('name') or data.get('play', '')}")
        elif kind in _RESULT_EVENTS:
            self._task_result(kind, data)
        elif kind == "playbook_on_stats":
            self._stats(data)
        return True

    def _task_result(self, kind: str, data: dict[str, Any]) -> None:
        host, task = data.get("host", "?"), data.get("task", "?")
        res = data.get("res") or {}
        status = _RESULT_EVENTS[kind]
        if kind == "runner_on_ok" and res.get("changed"):
            status = "changed"
        elif kind == "runner_on_ok" and "censored" in res:
            status = "no_log"  # a hidden result does not say whether it changed anything
        if kind == "runner_on_failed" and data.get("ignore_errors"):
            status = "failed (ignored)"
        elif kind in {"runner_on_failed", "runner_on_unreachable"}:
            self.failures.append(Failure(host, task, _message(res)))
        said = f": {res['msg']}" if data.get("task_action") in _DEBUG_ACTIONS and res.get("msg") else ""
        self._say(f"  {status:<11} {host}: {task}{said}")

    def _stats(self, data: dict[str, Any]) -> None:
        # Keep the set_stats payload in memory only: it may carry the kubeconfig.
        self.result.stats = data.pop("artifact_data", {}) or {}
        hosts = set(data.get("ok", {})) | set(data.get("changed", {})) | set(data.get("skipped", {}))
        hosts |= set(data.get("failures", {})) | set(data.get("dark", {}))
        for host in sorted(hosts):
            self.result.changed[host] = data.get("changed", {}).get(host, 0)
            self.result.ok[host] = data.get("ok", {}).get(host, 0)
            self.result.skipped[host] = data.get("skipped", {}).get(host, 0)
            failed = data.get("failures", {}).get(host, 0) + data.get("dark", {}).get(host, 0)
            self._say(
                f"RECAP {host}: ok={self.result.ok[host]} changed={self.result.changed[host]}"
                f" skipped={self.result.skipped[host]} failed={failed}"
            )


def _write_private(directory: Path, name: str, content: str) -> Path:
    path = directory / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(content)
    return path


def _forget_environment(artifact_dir: Path) -> None:
    """Drop the process environment ansible-runner records in its `command` artifact.

    The caller's environment may hold credentials (a Pulumi passphrase or access token).
    """
    command = artifact_dir / "command"
    if command.is_file():
        record = json.loads(command.read_text())
        record.pop("env", None)
        command.write_text(json.dumps(record))


def _search_path() -> str:
    """PATH with this Python environment's bin/ first: Pulumi may run us without it on PATH."""
    return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", os.defpath)])


def run_playbook(
    workdir: Path,
    playbook: str,
    inventory: Mapping[str, Any],
    extravars: Mapping[str, Any] | None = None,
    *,
    secret_vars: Mapping[str, Any] | None = None,
    ansible_dir: Path = ANSIBLE_DIR,
    quiet: bool = False,
) -> PlaybookResult:
    """Run `ansible_dir/playbooks/<playbook>` (e.g. "site.yml") against `inventory`.

    workdir: ansible-runner's private data dir (created 0700; its artifacts hold no secrets).
    inventory: an Ansible YAML-style inventory dict, e.g. from lab.inventory.build_inventory.
    extravars: non-secret extra variables (they appear in ansible-runner's command artifact).
    secret_vars: variables that must stay secret (join token); passed through a 0600 file
        that exists only while the playbook runs. Tasks using them must set `no_log`.
    quiet: print nothing; otherwise one line per task result and a recap per host go to stderr.
    Returns the per-host counts and the `set_stats` values; raises PlaybookError on failure.
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
    recorder = _Recorder(playbook, None if quiet else sys.stderr)
    with tempfile.TemporaryDirectory(prefix="secrets-", dir=workdir) as secrets_dir:
        cmdline = None
        if secret_vars:
            path = _write_private(Path(secrets_dir), "vars.json", json.dumps(dict(secret_vars)))
            cmdline = f"-e @{path}"
        runner = ansible_runner.run(
            private_data_dir=str(workdir),
            project_dir=str(ansible_dir),
            playbook=f"playbooks/{playbook}",
            inventory=dict(inventory),
            extravars=dict(extravars or {}),
            cmdline=cmdline,
            envvars={"ANSIBLE_CONFIG": str(ansible_dir / "ansible.cfg"), "PATH": _search_path()},
            suppress_env_files=True,
            quiet=True,
            event_handler=recorder,
            rotate_artifacts=5,
        )
    _forget_environment(Path(runner.config.artifact_dir))
    if runner.status != "successful" or recorder.failures:
        output = runner.stdout.read() if runner.stdout else ""
        raise PlaybookError(playbook, recorder.failures, runner.status, output)
    return recorder.result


__all__ = ["ANSIBLE_DIR", "Failure", "PlaybookError", "PlaybookResult", "run_playbook"]
