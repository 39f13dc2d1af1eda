"""The fresh Python process that runs one playbook through ansible-runner, started by lab.bootstrap.playbook.

It reads a `Request` (one line of JSON) on stdin, prints progress on stderr as the run goes, and
answers on stdout with ansible-playbook's process id once it is known (a line of JSON) and an
`Outcome` (the last line). Only the answer goes to stdout: the real stdout is set
aside and file descriptor 1 points at stderr during the run, so nothing else can corrupt it. When
its stdin ends before the run does, the process that asked is gone, and the run is cancelled; so
it is on SIGTERM, SIGINT or SIGHUP, which may reach this process and the one that asked together
(a shutdown, a `kill` of the operator's process group), leaving nobody else to clean up: the
cancelled run ends normally here and its secret variables file goes with it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

import ansible_runner

from lab.bootstrap.ansible_data import mark
from lab.bootstrap.playbook import (
    PLAYBOOK_PID,
    SECRETS_PREFIX,
    Failure,
    Outcome,
    PlaybookResult,
    Request,
)
from lab.bootstrap.playbook_progress import Progress
from lab.bootstrap.run_cleanup import close_connections, stop_playbook

# Events that end a task on one host, and the word shown for each.
_RESULT_EVENTS = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_unreachable": "unreachable",
    "runner_on_skipped": "skipped",
}


# ansible-runner turns Ansible's host key checking off unless the environment sets it
# (ansible_runner/config/_base.py), and Ansible's ssh plugin then puts `-o StrictHostKeyChecking=no`
# before the inventory's own options; ssh keeps the first value it gets for an option, so the
# stack's `ssh.hostKeyPolicy` (in ansible_ssh_common_args) would never apply.
_HOST_KEYS_CHECKED = {"ANSIBLE_HOST_KEY_CHECKING": "True"}


# Modules whose message is the point of the task (e.g. why a step is skipped): shown in progress.
_DEBUG_ACTIONS = {"debug", "ansible.builtin.debug"}


def _message(result: Mapping[str, Any]) -> str:
    """The most telling words a failed module left behind: its message and a command's stderr."""
    words = [str(result[key]).strip() for key in ("msg", "reason", "stderr") if result.get(key)]
    if not words and result.get("stdout"):
        words.append(str(result["stdout"]).strip())
    # A loop says only "One or more items failed": the first failed item says why.
    items = [item for item in result.get("results") or [] if isinstance(item, dict)]
    failed = [item for item in items if item.get("failed") or item.get("unreachable")]
    if failed:
        words.append(_message(failed[0]))
    return ": ".join(words) or "no message (run again with more verbosity to see why)"


class _Recorder:
    """Follows the event stream: reports progress, collects failures, counts and set_stats data."""

    def __init__(self, playbook: str, progress: Progress, started: Callable[[int], None]) -> None:
        self.result = PlaybookResult(playbook)
        self.failures: list[Failure] = []
        self.progress = progress
        self.started = started

    def __call__(self, event: dict[str, Any]) -> bool:
        kind = event.get("event", "")
        data = event.get("event_data", {})
        if kind == "playbook_on_start":
            self.started(event["pid"])
        elif kind == "playbook_on_play_start":
            self.progress.play_start(data.get("name") or data.get("play", ""))
        elif kind in _RESULT_EVENTS:
            self._task_result(kind, data)
        elif kind == "playbook_on_stats":
            self.progress.end_play()
            self._stats(data)
        return True

    def _task_result(self, kind: str, data: dict[str, Any]) -> None:
        host, task = data.get("host", "?"), data.get("task", "?")
        res = data.get("res") or {}
        if kind == "runner_on_unreachable":
            # no_log hides even ssh's reason: the line then says where to look instead.
            reason = "no_log hides what ssh said" if "censored" in res else _message(res)
            line = self.progress.unreachable(host, task, reason)
            self.failures.append(Failure(host, task, line, unreachable=True))
            return
        if kind == "runner_on_failed" and not data.get("ignore_errors"):
            self.failures.append(Failure(host, task, _message(res)))
            self.progress.failed(host, task, _message(res))
            return
        status = _RESULT_EVENTS[kind]
        if kind == "runner_on_ok" and res.get("changed"):
            status = "changed"
        elif kind == "runner_on_ok" and "censored" in res:
            status = "no_log"  # a hidden result does not say whether it changed anything
        elif kind == "runner_on_failed":
            status = "failed (ignored)"
        said = str(res["msg"]) if data.get("task_action") in _DEBUG_ACTIONS and res.get("msg") else ""
        self.progress.result(host, task, data.get("role", ""), status, said)

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
            counts = {
                "ok": self.result.ok[host],
                "changed": self.result.changed[host],
                "skipped": self.result.skipped[host],
                "failed": failed,
            }
            self.progress.recap(host, counts)


def _private_file(path: Path) -> TextIO:
    """`path` opened for writing, emptied, readable by this user alone."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w")


def _write_private(directory: Path, name: str, content: str) -> Path:
    path = directory / name
    with _private_file(path) as handle:
        handle.write(content)
    return path


def run(request: Request, cancelled: Callable[[], bool], started: Callable[[int], None]) -> Outcome:
    """Run the requested playbook in this process.

    `cancelled` is asked while it runs; `started` is told ansible-playbook's process id.
    """
    workdir = Path(request.workdir)
    ansible_dir = Path(request.ansible_dir)
    # The directory (0700) and its file go when the run ends, however it ends short of a kill;
    # lab.bootstrap.playbook removes what a killed process left.
    with (
        tempfile.TemporaryDirectory(prefix=SECRETS_PREFIX, dir=workdir) as secrets_dir,
        _private_file(Path(request.log)) as log,
    ):
        out = None if request.quiet else sys.stderr
        progress = Progress(out, log, request.verbose, request.inventory)
        recorder = _Recorder(request.playbook, progress, started)
        cmdline = None
        if request.secret_vars:
            path = _write_private(Path(secrets_dir), "vars.json", json.dumps(mark(request.secret_vars)))
            # ansible-runner splits its cmdline as a shell would: a folder with a space stays one word.
            cmdline = shlex.join(["-e", f"@{path}"])
        try:
            runner = ansible_runner.run(
                private_data_dir=str(workdir),
                project_dir=str(ansible_dir),
                playbook=f"playbooks/{request.playbook}",
                # Data, never templates: lab.bootstrap.ansible_data says why.
                inventory=mark(request.inventory),
                extravars=mark(request.extravars),
                cmdline=cmdline,
                limit=",".join(request.limit) if request.limit is not None else None,
                envvars={
                    "ANSIBLE_CONFIG": str(ansible_dir / "ansible.cfg"),
                    # A worker per node: each task runs on every node at once, so N agents join
                    # the cluster together whatever N is (ansible.cfg's forks caps a hand run).
                    "ANSIBLE_FORKS": str(max(1, len(request.inventory.get("all", {}).get("hosts", {})))),
                    "ANSIBLE_SSH_CONTROL_PATH_DIR": request.control_dir,
                    **_HOST_KEYS_CHECKED,
                },
                suppress_env_files=True,
                quiet=True,
                event_handler=recorder,
                cancel_callback=cancelled,
                rotate_artifacts=5,
            )
        finally:
            # This process outlives an operator's that was killed: it ends the run's logins too.
            close_connections(workdir)
    if runner.status != "successful" or recorder.failures:
        output = runner.stdout.read() if runner.stdout else ""
        return Outcome(None, recorder.failures, runner.status, output, recorder.result.stats)
    return Outcome(recorder.result)


class _Cancel:
    """Cancels the run: stops ansible-playbook with SIGTERM first, so that it stops its workers
    (each in a session of its own), and any worker still there, then tells ansible-runner, which
    would only SIGKILL ansible-playbook's group and leave a worker holding the run's variables,
    the secret ones included."""

    def __init__(self, workdir: Path) -> None:
        self.requested = threading.Event()
        self.playbook: int | None = None
        self.workdir = workdir

    def started(self, pid: int) -> None:
        self.playbook = pid

    def __call__(self, *_: object) -> None:
        threading.Thread(target=self._stop, daemon=True).start()

    def _stop(self) -> None:
        stop_playbook(self.playbook, self.workdir)
        self.requested.set()


def _watch(stdin: TextIO, cancel: _Cancel) -> None:
    stdin.read()
    cancel()


def main() -> None:
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    request = Request(**json.loads(sys.stdin.readline()))
    cancel = _Cancel(Path(request.workdir))
    threading.Thread(target=_watch, args=(sys.stdin, cancel), daemon=True).start()
    for stop in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(stop, cancel)

    def say(line: str) -> None:
        # Whoever asked may be gone (terminated with this process): the run still ends cleanly.
        with contextlib.suppress(BrokenPipeError):
            answer.write(line + "\n")
            answer.flush()

    def started(pid: int) -> None:
        cancel.started(pid)
        say(json.dumps({PLAYBOOK_PID: pid}))

    outcome = run(request, cancel.requested.is_set, started)
    say(outcome.to_json())


if __name__ == "__main__":
    main()
