"""A real Kubernetes control plane for the tests that run the lab's program for real: etcd, the
API server (with the k3s role's Pod Security admission configuration), the controller-manager,
the scheduler and kwok nodes made from a stack's machines, in a network namespace of its own, and,
when asked, Kueue beside it (lab.controlplane.kueue).

`running(name, nodes, stack, kueue_for)` starts it and stops it on leaving, leaving no process, mount,
namespace or file; it first removes whatever a killed earlier run of the same name left.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from lab.config import LabConfig
from lab.config.machines import Node
from lab.controlplane import admission, components, kubeconfig, kueue, netns, nodes, pki
from lab.controlplane.client import kubectl
from lab.controlplane.layout import Layout
from lab.testbed import tools
from lab.testbed.processes import kill_tree

READY_TIMEOUT = 90.0
STOP_GRACE = 10.0


class ControlPlaneError(RuntimeError):
    """A component that did not start; the message quotes the end of its log."""


@dataclass
class ControlPlane:
    layout: Layout
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, component: components.Component) -> None:
        self.layout.logs.mkdir(parents=True, exist_ok=True)
        with (self.layout.logs / f"{component.name}.log").open("wb") as log:
            self.processes[component.name] = subprocess.Popen(
                [*netns.inside(self.layout), *component.argv],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def failure(self, what: str) -> ControlPlaneError:
        """`what` went wrong; the message names the components that exited and their logs' ends."""
        lines = [what]
        for name, proc in self.processes.items():
            if proc.poll() is not None:
                tail = (self.layout.logs / f"{name}.log").read_text(errors="replace").splitlines()[-5:]
                lines.append(f"{name} exited ({proc.returncode}): {' / '.join(tail)}")
        return ControlPlaneError("; ".join(lines))

    def wait(
        self, what: str, check: list[str], timeout: float = READY_TIMEOUT, stdin: str | None = None
    ) -> None:
        """Until `kubectl CHECK` succeeds; fail as soon as a component exits."""
        deadline = time.monotonic() + timeout
        while kubectl(self.layout, *check, stdin=stdin, check=False, timeout=30).returncode != 0:
            if any(p.poll() is not None for p in self.processes.values()):
                raise self.failure(f"{what}: a component exited")
            if time.monotonic() > deadline:
                raise self.failure(f"{what}: not within {timeout:.0f} s")
            time.sleep(0.5)

    def stop(self) -> None:
        """SIGTERM every component, newest first, SIGKILL what outlives the grace period."""
        for proc in reversed(self.processes.values()):
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
        deadline = time.monotonic() + STOP_GRACE
        for proc in reversed(self.processes.values()):
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                kill_tree(proc.pid)
                proc.wait()
        self.processes.clear()


def leftovers(layout: Layout) -> list[str]:
    """What control plane `layout.name` has on this machine: its namespace and its folder."""
    return [str(p) for p in (layout.netns_path, layout.state) if p.exists()]


def remove(layout: Layout) -> None:
    """Remove every trace of control plane `layout.name`, running or left by a killed run."""
    netns.remove(layout)
    shutil.rmtree(layout.state, ignore_errors=True)


def up(layout: Layout, machines: list[Node], stack: str, kueue_for: LabConfig | None = None) -> ControlPlane:
    """Start control plane `layout.name` with `machines` as kwok nodes, and Kueue configured as
    the lab `kueue_for` would install it; ready when it returns."""
    remove(layout)
    bin_dir = tools.bin_dir()
    layout.state.mkdir(parents=True)
    layout.state.chmod(0o700)
    certs = pki.create(layout)
    kubeconfig.write(layout, certs)
    admission_file = layout.state / "admission.yaml"
    admission.write(admission_file, stack)
    netns.create(layout)
    plane = ControlPlane(layout)
    try:
        plane.start(components.etcd(bin_dir, layout))
        plane.start(components.apiserver(bin_dir, layout, certs, admission_file))
        plane.wait("the API server", ["get", "--raw", "/readyz"])
        for component in components.controllers(bin_dir, layout, certs):
            plane.start(component)
        # The controller-manager's token controller has run once the default ServiceAccount exists.
        plane.wait("the controller-manager", ["get", "serviceaccount", "default", "-n", "default"])
        nodes.create(layout, machines)
        if kueue_for is not None:
            plane.start(kueue.prepare(bin_dir, layout, certs, kueue_for))
            kueue.register_webhooks(layout, certs)
            plane.wait("Kueue", ["create", "--dry-run=server", "-f", "-"], stdin=kueue.PROBE)
    except BaseException:
        plane.stop()
        remove(layout)
        raise
    return plane


@contextlib.contextmanager
def running(
    name: str, machines: list[Node], stack: str, kueue_for: LabConfig | None = None
) -> Iterator[ControlPlane]:
    layout = Layout(name)
    plane = up(layout, machines, stack, kueue_for)
    try:
        yield plane
    finally:
        plane.stop()
        remove(layout)


__all__ = ["ControlPlane", "ControlPlaneError", "Layout", "kubectl", "leftovers", "remove", "running", "up"]
