"""Runs one of the lab's playbooks through ansible-runner, in a fresh Python process, and reports.

Why a fresh process: on `pulumi up` this code runs inside Pulumi's dynamic provider host, a gRPC
server whose threads are running; ansible-runner starts `ansible-playbook` through pexpect, which
forks, and a fork taken while gRPC threads run dies (SIGSEGV or SIGABRT) before the playbook
starts in a large share of runs (pulumi/pulumi#9110, #18849; grpc/grpc#13873). So `run_playbook`
starts `python -m lab.bootstrap.playbook_process` with `subprocess` (fork and exec in one step, no Python
code between them), hands it the request, secrets included, on stdin and reads the result, the
kubeconfig included, from its stdout: neither touches disk or a command line. Progress (a line
per play and host, each failure in full: lab.bootstrap.playbook_progress) reaches the operator on stderr as
it happens, every task's line the run's log (log_file); a failure raises PlaybookError naming the
host, the task and the module's message. Values the playbook
returns with `set_stats` come back in the result (the fact cache is empty with ansible-core 2.19).

Secrets never reach ansible-runner's artifacts: the process gets only the environment variables
that ansible-playbook and ssh need (ansible-runner writes the whole environment into its `command`
artifact at start, and the operator's may hold PULUMI_CONFIG_PASSPHRASE or an access token), env
files are suppressed, secret variables travel in a private file that exists only while the
playbook runs (removed by the process, and again by this one after the process ended, however it
ended, and at the start of the next run), and the set_stats payload is taken out of the stats event
before ansible-runner writes the event to disk.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lab.bootstrap.run_cleanup import (
    RUN_MARK,
    close_connections,
    control_dir,
    kill_stragglers,
    new_mark,
    private_dir,
    stop_playbook,
)
from lab.paths import ANSIBLE_DIR, ROOT

# The module run as the fresh process (lab/bootstrap/playbook_process.py).
PROCESS_MODULE = "lab.bootstrap.playbook_process"
# The private directories that hold secret variables while a playbook runs, in the work directory.
SECRETS_PREFIX = "secrets-"
# The key of the answer line that gives ansible-playbook's process id.
PLAYBOOK_PID = "playbook_pid"
# Environment variables the playbook process keeps: what ansible-playbook and ssh need (home,
# locale, the SSH agent's socket), nothing that authenticates anyone.
KEPT_ENVIRONMENT = ("HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "SSH_AUTH_SOCK")


class PlaybookError(RuntimeError):
    """A playbook run that did not succeed; the message names host, task and the module's words."""

    def __init__(
        self,
        playbook: str,
        failures: list[Failure],
        status: str,
        output: str = "",
        log: str = "",
        aftermath: str = "",
        stats: dict[str, Any] | None = None,
    ) -> None:
        self.playbook = playbook
        self.failures = failures
        self.status = status
        self.output = output
        self.log = log  # the run's full log, every task's line
        self.aftermath = aftermath  # what was done about the failure, and what the operator does
        # The set_stats data of the plays that ran (in memory only); None: the run ended without
        # saying, so nothing is known of what it did.
        self.stats = stats
        if failures:
            detail = "\n".join(f"  - {f}" for f in failures)
        else:
            tail = "\n".join(f"    {line}" for line in output.strip().splitlines()[-15:])
            detail = f"  - the run ended with status {status!r} before any task failed:\n{tail}"
        super().__init__(f"{playbook} failed:\n{detail}" + (f"\n{aftermath}" if aftermath else ""))

    def followed_by(self, aftermath: str) -> PlaybookError:
        """This failure, with what was done about it said last."""
        return PlaybookError(
            self.playbook, self.failures, self.status, self.output, self.log, aftermath, self.stats
        )


@dataclass(frozen=True)
class Failure:
    host: str
    task: str
    message: str  # for an unreachable host: the line that says what to check
    unreachable: bool = False

    def __str__(self) -> str:
        if self.unreachable:
            return self.message
        return f"host {self.host}, task {self.task!r}: {self.message}"


@dataclass
class PlaybookResult:
    """What a successful run did: per-host counts and the values set with `set_stats`."""

    playbook: str
    changed: dict[str, int] = field(default_factory=dict)
    ok: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    log: str = ""  # the run's full log, every task's line

    @property
    def total_changed(self) -> int:
        return sum(self.changed.values())


@dataclass(frozen=True)
class Request:
    """What the playbook process is asked to do; it travels on the process's stdin only."""

    workdir: str
    playbook: str
    inventory: dict[str, Any]
    extravars: dict[str, Any]
    secret_vars: dict[str, Any]
    ansible_dir: str
    quiet: bool
    control_dir: str
    verbose: bool
    log: str
    # Ansible's --limit: the hosts the plays run on; the others stay in the inventory (a task may
    # be delegated to them). None: every host.
    limit: list[str] | None = None


@dataclass(frozen=True)
class Outcome:
    """What the playbook process answers on its stdout: a result, or why the run failed."""

    result: PlaybookResult | None = None
    failures: list[Failure] = field(default_factory=list)
    status: str = ""
    output: str = ""
    stats: dict[str, Any] = field(default_factory=dict)  # a failed run's set_stats data

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Outcome:
        result = PlaybookResult(**data["result"]) if data["result"] is not None else None
        failures = [Failure(**f) for f in data["failures"]]
        return cls(result, failures, data["status"], data["output"], data.get("stats") or {})


def _scrub_secrets(workdir: Path) -> None:
    """Remove every secret a run may have left in `workdir`.

    A process that was killed leaves its secret variables file, and, when it died while
    ansible-runner was taking an event in, that event's `-partial.json` (the stats event holds the
    kubeconfig until the runner strips it).
    """
    for leftover in workdir.glob(f"{SECRETS_PREFIX}*"):
        shutil.rmtree(leftover, ignore_errors=True)
    for partial in workdir.glob("artifacts/*/job_events/*-partial.json"):
        partial.unlink(missing_ok=True)


@contextmanager
def _exclusive(workdir: Path) -> Iterator[None]:
    """One run at a time in a work directory: scrubbing at start-up must not hit a live run's files."""
    with open(workdir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _environment(mark: str) -> dict[str, str]:
    """The playbook process's environment: the kept variables, this Python's bin/ first on PATH
    (Pulumi may run us without it), this checkout's lab package importable and the run's mark."""
    kept = {name: os.environ[name] for name in KEPT_ENVIRONMENT if name in os.environ}
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", os.defpath)])
    return {**kept, "PATH": path, "PYTHONPATH": str(ROOT), RUN_MARK: mark}


def _how_it_ended(returncode: int) -> str:
    if returncode < 0:
        return f"playbook process killed by {signal.Signals(-returncode).name}"
    return f"playbook process exited with code {returncode} without a result"


def run_playbook(
    workdir: Path,
    playbook: str,
    inventory: Mapping[str, Any],
    extravars: Mapping[str, Any] | None = None,
    *,
    secret_vars: Mapping[str, Any] | None = None,
    ansible_dir: Path = ANSIBLE_DIR,
    quiet: bool = False,
    verbose: bool = False,
    limit: list[str] | None = None,
) -> PlaybookResult:
    """Run `ansible_dir/playbooks/<playbook>` (e.g. "site.yml") against `inventory`.

    Safe to call from any process, the Pulumi provider host included: the run happens in a fresh
    Python process.
    workdir: ansible-runner's private data dir (created 0700; its artifacts hold no secrets).
    inventory: an Ansible YAML-style inventory dict, e.g. from lab.bootstrap.inventory.build_inventory.
    extravars: non-secret extra variables (they appear in ansible-runner's command artifact).
    secret_vars: variables that must stay secret (tokens); they reach ansible-playbook through a
        0600 file that exists only while the playbook runs. Tasks using them must set `no_log`.
    quiet: print nothing; otherwise a line per play and host, and each failure in full, go to
        stderr (lab.bootstrap.playbook_progress).
    verbose: every task's line to stderr as well; it always goes to the run's log, log_file().
    limit: run the plays on these hosts only (the others stay reachable for delegated tasks);
        an empty list is refused (ValueError): Ansible reads an empty --limit as no limit at all.
    Returns the per-host counts and the `set_stats` values; raises PlaybookError on failure.
    """
    if limit is not None and not limit:
        # ansible-runner passes any limit but None on as `--limit`, and Ansible drops an empty
        # pattern and then restricts nothing (ansible-core InventoryManager.subset, get_hosts).
        raise ValueError(f"{playbook}: an empty limit names no host, and Ansible would run it on every host")
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
    request = Request(
        str(workdir.resolve()),
        playbook,
        dict(inventory),
        dict(extravars or {}),
        dict(secret_vars or {}),
        str(Path(ansible_dir).resolve()),
        quiet,
        str(control_dir(workdir)),
        verbose,
        str(log_file(workdir, playbook)),
        list(limit) if limit is not None else None,
    )
    with _exclusive(workdir):
        kill_stragglers(workdir)
        close_connections(workdir)
        _scrub_secrets(workdir)
        private_dir(control_dir(workdir))
        try:
            answer, returncode = _run_process(request, new_mark(workdir))
        finally:
            _scrub_secrets(workdir)
            close_connections(workdir)
    log = str(log_file(workdir, playbook))
    if answer is None:
        raise PlaybookError(playbook, [], _how_it_ended(returncode), log=log)
    if answer.result is None:
        raise PlaybookError(playbook, answer.failures, answer.status, answer.output, log, stats=answer.stats)
    answer.result.log = log
    return answer.result


def log_file(workdir: Path, playbook: str) -> Path:
    """The full log of the latest run of `playbook` in `workdir` (0600): every task's line."""
    return workdir.resolve() / f"{Path(playbook).stem}.log"


def _run_process(request: Request, mark: str) -> tuple[Outcome | None, int]:
    """Start the playbook process, hand it `request`, and return its outcome and exit code.

    Its stdin stays open until it has answered: when this process dies first, the playbook
    process sees the end of its stdin and cancels the run. When the playbook process dies without
    an outcome, the ansible-playbook it started is stopped too: pexpect made it the leader of its
    own session, immune to the hang-up, and it would go on changing hosts unobserved and write
    the set_stats payload (the kubeconfig) into a partial event that nobody strips.
    """
    process = subprocess.Popen(
        [sys.executable, "-m", PROCESS_MODULE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=_environment(mark),
        cwd=request.workdir,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    outcome, playbook_pid = None, None
    try:
        process.stdin.write(json.dumps(asdict(request)) + "\n")
        process.stdin.flush()
        for line in process.stdout:
            said = json.loads(line)
            if PLAYBOOK_PID in said:
                playbook_pid = said[PLAYBOOK_PID]
            else:
                outcome = Outcome.from_dict(said)
    finally:
        process.stdin.close()
        process.stdout.close()
        returncode = process.wait()
        if outcome is None:
            stop_playbook(playbook_pid, Path(request.workdir))
    return outcome, returncode


__all__ = [
    "ANSIBLE_DIR",
    "Failure",
    "PlaybookError",
    "PlaybookResult",
    "run_playbook",
]
