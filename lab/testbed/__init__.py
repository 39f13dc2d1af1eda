"""Local test machines: N Debian 12 machines booted with systemd-nspawn, each in its own network
namespace on a private bridge, reachable over SSH with a per-testbed key, with an apt proxy on the
host side. `up` builds them; `down` removes every trace, also after a failed `up`.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from lab.testbed import aptproxy, cgroups, machines, network, pod_network, processes, rootfs
from lab.testbed.commands import TestbedError, missing_tools, run
from lab.testbed.layout import CACHE_ROOT, Layout, Machine

__all__ = ["Layout", "Machine", "Testbed", "TestbedError", "down", "exclusive", "leftovers", "load", "up"]

BOOT_TIMEOUT_S = 90
LOCK = Path("/run/lock/k8scifar-testbed.lock")
# Set while this process holds LOCK (to its id), and so in every process it starts meanwhile.
LOCK_HOLDER = "K8SCIFAR_TESTBED_LOCK_HOLDER"
STOP_GRACE_S = 15


@dataclass(frozen=True)
class Testbed:
    """A running testbed: its layout and the processes that keep it alive."""

    layout: Layout
    pids: dict[str, int]

    @property
    def record(self) -> Path:
        return self.layout.state / "testbed.json"


def _preflight(layout: Layout) -> None:
    """Every reason `up` cannot work, found before anything is created."""
    problems = []
    if os.geteuid() != 0:
        problems.append("must run as root (it creates network namespaces, links and mounts)")
    missing = missing_tools()
    if missing:
        problems.append(f"missing host tools: {', '.join(missing)}; install them (scripts/setup.sh as root)")
    if layout.state.exists() or network.own_namespaces(layout) or network.own_links(layout):
        problems.append(
            f"testbed {layout.name!r} is already up or left over; run `python -m lab.testbed down"
            f" --name {layout.name}` first"
        )
    elif _subnet_in_use(layout):
        problems.append(f"{layout.subnet} overlaps an address on this host; choose another --subnet")
    if problems:
        raise TestbedError("cannot create the testbed:\n" + "\n".join(f"  - {p}" for p in problems))


def _subnet_in_use(layout: Layout) -> bool:
    entries = json.loads(run(["ip", "-j", "addr", "show"]).stdout or "[]")
    addresses = [a["local"] for e in entries for a in e.get("addr_info", []) if a.get("family") == "inet"]
    return any(ipaddress.ip_address(a) in layout.network for a in addresses)


@contextlib.contextmanager
def exclusive(waiting: Callable[[], None] | None = None) -> Iterator[None]:
    """Take turns with other test runs, benchmarks and `labctl try` on this machine.

    The holder's processes take its turn: a `labctl try` that the test session (holding the lock)
    starts must not wait for the lock its parent holds. The holder marks its environment, which
    the processes it starts inherit. `waiting` is called once when the lock is taken.
    """
    if os.environ.get(LOCK_HOLDER):
        yield
        return
    with LOCK.open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting is not None:
                waiting()
            fcntl.flock(lock, fcntl.LOCK_EX)
        os.environ[LOCK_HOLDER] = str(os.getpid())
        try:
            yield
        finally:
            del os.environ[LOCK_HOLDER]


def up(layout: Layout) -> Testbed:
    """Create and boot the machines; on any failure remove what was made and re-raise."""
    _preflight(layout)
    layout.state.mkdir(parents=True, mode=0o700)
    try:
        return _build(layout)
    except BaseException:
        down(layout)
        raise


def _build(layout: Layout) -> Testbed:
    mirror = aptproxy.host_mirror()
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"k8scifar-testbed-{layout.name}",
         "-f", str(layout.key)])  # fmt: skip
    layout.key.chmod(0o600)
    public_key = layout.key.with_suffix(".pub").read_text()
    base = rootfs.base_tree(mirror)
    network.create(layout)
    pod_network.route(layout)
    pids = {"apt-cacher-ng": aptproxy.start(layout, mirror).pid}
    testbed = Testbed(layout, pids)
    _save(testbed)
    machines.prepare_runtime_dir(layout)
    booting = {}
    for machine in layout.machines:
        rootfs.install(layout, machine, base, public_key)
        pod_network.install(layout, machine)
        booting[machine] = machines.boot(machine, layout.state / f"{machine.name}.log")
        pids[machine.name] = booting[machine].pid
        _save(testbed)
    for machine, proc in booting.items():
        machines.wait_for_ssh(layout, machine, proc, BOOT_TIMEOUT_S)
    return testbed


def _save(testbed: Testbed) -> None:
    layout = testbed.layout
    record = {"name": layout.name, "count": layout.count, "subnet": layout.subnet, "pids": testbed.pids}
    testbed.record.write_text(json.dumps(record, indent=2) + "\n")


def load(name: str) -> Testbed:
    """The running testbed `name`, as `up` recorded it."""
    layout = Layout(name=name)
    try:
        record = json.loads(layout.state.joinpath("testbed.json").read_text())
    except FileNotFoundError:
        raise TestbedError(f"testbed {name!r} is not up; run `python -m lab.testbed up`") from None
    return Testbed(Layout(record["name"], record["count"], record["subnet"]), record["pids"])


def down(layout: Layout, purge_cache: bool = False) -> None:
    """Stop every process, then remove namespaces, links, mounts and files of testbed `layout.name`."""
    record = layout.state / "testbed.json"
    pids = json.loads(record.read_text())["pids"] if record.exists() else {}
    _stop_sessions(
        {pid: "apt-cacher-ng" if name == "apt-cacher-ng" else "systemd-nspawn" for name, pid in pids.items()}
    )
    for netns in network.own_namespaces(layout):
        for pid in network.namespace_pids(netns):
            _kill(pid, signal.SIGKILL)
    try:
        for machine in layout.machines:
            cgroups.remove(machine)
    finally:
        network.remove(layout)
    if layout.state.exists():
        machines.release_runtime_dir(layout)
        shutil.rmtree(layout.state)
    with contextlib.suppress(OSError):
        layout.state.parent.rmdir()  # only when no other testbed remains
    if purge_cache:
        shutil.rmtree(CACHE_ROOT, ignore_errors=True)
    left = leftovers(layout)
    if left:
        raise TestbedError(f"testbed {layout.name!r} is not fully removed: {'; '.join(left)}")


def leftovers(layout: Layout) -> list[str]:
    """Whatever of testbed `layout.name` still exists: namespaces, links, files, processes, mounts."""
    found = [f"network namespace {n}" for n in network.own_namespaces(layout)]
    found += [f"link {link}" for link in network.own_links(layout)]
    found += [f"cgroup {path}" for m in layout.machines for path in cgroups.machine_paths(m) if path.exists()]
    if layout.state.exists():
        found.append(f"folder {layout.state}")
    state = str(layout.state)
    for proc in Path("/proc").glob("[0-9]*"):
        if any(state in arg for arg in processes.command_line(int(proc.name))):
            found.append(f"process {proc.name} ({' '.join(processes.command_line(int(proc.name)))[:80]})")
    return found


def _stop_sessions(programs: dict[int, str]) -> None:
    """Ask the processes `up` started (pid -> program) to stop, nspawn shutting its machine down,
    then kill their sessions. All are asked at once and share one grace period: a machine that
    does not shut down in time costs that period once, not once per machine."""
    ours = [pid for pid, program in programs.items() if _runs(pid, program)]
    for pid in ours:
        _kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline and any(_alive(pid) for pid in ours):
        time.sleep(0.2)
    for pid in ours:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)  # started with its own session: group id == pid
        _reap(pid)


def _runs(pid: int, program: str) -> bool:
    """Whether `pid` still runs `program` (once gone, its id may belong to someone else)."""
    try:
        return program.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False


def _kill(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _alive(pid: int) -> bool:
    _reap(pid)
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def _reap(pid: int) -> None:
    """Collect our own exited child (when `down` runs in the process that ran `up`)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def ssh(testbed: Testbed, machine: Machine, *command: str, timeout: float = 120) -> str:
    """Run `command` on `machine` over SSH and return its output; TestbedError when it fails."""
    return run(machines.ssh_command(testbed.layout, machine, *command), timeout=timeout).stdout
