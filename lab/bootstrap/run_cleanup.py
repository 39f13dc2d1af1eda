"""Ending a playbook run and what it leaves: every process of the run, found by the mark its
environment carries, and the ssh connection masters Ansible keeps open to the nodes. Both the
operator's process (lab.bootstrap.playbook) and the playbook process use it.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from lab.files import write_file

# Every process of a run carries this variable, set to the run's own random mark: the playbook
# process, ansible-playbook, its workers and their ssh inherit it. Clean-up kills the processes
# of this user that carry the mark of the run in the work directory, named in MARK_FILE, and no
# other: a command line that mentions the work directory proves nothing (anyone can write one).
RUN_MARK = "K8SCIFAR_PLAYBOOK_RUN"
MARK_FILE = ".run-mark"
# Readings of /proc for a dead run's processes, at most: each catches what forked during the last.
STRAGGLER_PASSES = 20
# A unix socket's path holds at most 107 bytes and its NUL (unix(7), sun_path). In the control
# folder ansible-core names a master's socket by 10 hex digits (ssh plugin, _create_control_path),
# and ssh binds it first as `<socket>.<16 random letters>` (OpenSSH mux.c, muxserver_listen).
SOCKET_PATH_MAX = 107
SOCKET_NAME_BYTES = len("/") + 10 + len(".") + 16
# Where the control folder goes when the temporary folder's path is too long for the sockets.
SHORT_ROOT = Path("/tmp")


def new_mark(workdir: Path) -> str:
    """A fresh mark for the run about to start in `workdir`, recorded there (0600) for clean-up."""
    mark = secrets.token_hex(16)
    write_file(workdir / MARK_FILE, mark, 0o600)
    return mark


def kill_stragglers(workdir: Path) -> None:
    """SIGKILL every process of this user that carries the mark of the last run in `workdir`.

    Runs in a work directory take turns, so any such process is left from a run whose playbook
    process died: an ansible worker, in a session of its own, that its ansible-playbook did not
    stop (or that lost its ansible-playbook to the hang-up of their terminal) goes on with the
    run's variables, the secret ones included. The process calling this is spared.
    """
    wanted = _run_mark(workdir)
    if wanted is None:
        return
    # A process can fork while /proc is read, its child listed after the reading passed it:
    # read again until a pass finds none (a pass after the last fork finds its children).
    for _ in range(STRAGGLER_PASSES):
        if not _kill_own(lambda proc: wanted in (proc / "environ").read_bytes().split(b"\0")):
            return
        time.sleep(0.05)


def _run_mark(workdir: Path) -> bytes | None:
    """`RUN_MARK=<mark>` of the last run in `workdir`, as its processes' environments hold it."""
    try:
        return f"{RUN_MARK}={(workdir / MARK_FILE).read_text().strip()}".encode()
    except FileNotFoundError:
        return None


def control_dir(workdir: Path) -> Path:
    """Where ssh keeps the connections Ansible reuses (ControlPersist, ansible-core's ssh plugin:
    `-o ControlMaster=auto -o ControlPersist=60s`) for runs in `workdir`: a folder of its own,
    not the shared ~/.ansible/cp, so that its masters can be found and closed, and a short path,
    for a socket's path is bounded (SOCKET_PATH_MAX): under the temporary folder ($TMPDIR) when
    the sockets fit there, else under /tmp, for an operator's $TMPDIR may be a deep folder."""
    digest = hashlib.sha256(str(workdir.resolve()).encode()).hexdigest()[:12]
    folder = Path(tempfile.gettempdir()) / f"k8scifar-ssh-{digest}"
    if len(os.fsencode(folder)) + SOCKET_NAME_BYTES > SOCKET_PATH_MAX:
        return SHORT_ROOT / folder.name
    return folder


def private_dir(path: Path) -> None:
    """`path` as a folder only this user can enter (made now, or found so): a folder in /tmp that
    someone else made could hand them the connections to the nodes."""
    path.mkdir(mode=0o700, exist_ok=True)
    found = path.lstat()
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o077:
        raise RuntimeError(f"{path} is not a private folder of this user; remove it and run again")


def close_connections(workdir: Path) -> None:
    """End the ssh connection masters of runs in `workdir`: each would otherwise keep a login to a
    node for a minute after the run (longer, hung, when the node went away), unseen. Each master
    is asked through its own socket in the run's control folder (ssh(1) `-O exit`), so nothing is
    chosen by what a process's command line says (anyone can write one); ssh rewrites its
    arguments and environment as its title, so neither would tell a master apart anyway.
    Both processes of a run call it: the playbook process outlives an operator's that was killed."""
    folder = control_dir(workdir)
    sockets = [p for p in folder.iterdir() if p.is_socket()] if folder.is_dir() else []
    for socket in sockets:
        # The destination is required on the command line and unused: the socket names the master.
        ask = ["ssh", "-o", f'ControlPath="{socket}"', "-O", "exit", "lab-node"]
        subprocess.run(ask, stdin=subprocess.DEVNULL, capture_output=True, timeout=15, check=False)
    shutil.rmtree(folder, ignore_errors=True)


def _kill_own(chosen: Callable[[Path], bool]) -> int:
    """SIGKILL every process of this user but the caller whose /proc folder is `chosen`; how many."""
    me, uid, killed = os.getpid(), os.geteuid(), 0
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if int(proc.name) == me or proc.stat().st_uid != uid:
                continue
            if chosen(proc):
                os.kill(int(proc.name), signal.SIGKILL)
                killed += 1
        except (OSError, ProcessLookupError):
            continue
    return killed


def stop_playbook(leader: int | None, workdir: Path) -> None:
    """Stop the run in `workdir`: the ansible-playbook that leads session `leader`, if it still
    does, then whatever of the run is left.

    SIGTERM first: ansible-playbook then stops its workers, which run in sessions of their own.
    """
    try:
        if leader is not None and os.getsid(leader) == leader:
            os.kill(leader, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while not _gone(leader) and time.monotonic() < deadline:
                time.sleep(0.05)
    except ProcessLookupError:
        pass  # ended before it was asked to
    finally:
        # Whatever happened to the leader, its workers may hold the run's secrets.
        kill_stragglers(workdir)


def _gone(pid: int) -> bool:
    """Whether `pid` has ended (a zombie waiting for its new parent to reap it has).

    The process may be reaped at any moment, its /proc entry going with it: a read that finds
    nothing means it has ended, so the entry is read once, never checked first.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"
