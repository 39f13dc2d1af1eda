"""Cross-host DDP on the testbed: one torchrun per machine, inside that machine's network namespace.

Ranks use the host's Python and files (a namespace changes only the network), rendezvous over
the bridge at the first machine's address and run Gloo over the veth links, so a fault on a link
or a rank is as real as on two computers. Each torchrun restarts its worker group after a failure
(`--max-restarts`) and the trainer resumes from the latest checkpoint.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lab.testbed import network, processes
from lab.testbed.commands import TestbedError
from lab.testbed.layout import Layout
from trainer import contract
from trainer.hyperparameters import nearest_batch
from trainer.launch import worker_environment

RDZV_PORT = 29400
TRAINER_MODULE = "trainer"
# small_run's global batch on two ranks: 16 steps an epoch of a try's 2048 generated images, above
# the trainer's MIN_STEPS_PER_EPOCH (trainer/loader.py), which warns that fewer cannot learn.
SMALL_BATCH = 128
# The trainer's progress lines: one after each epoch, one after loading a checkpoint.
EPOCH_LINE = r"^epoch +[0-9]+/[0-9]+ "
RESUMED_LINE = r"^resumed from "


@dataclass(frozen=True)
class Recovery:
    """How long a fault held the job up, from the moment of the fault."""

    regrouped_s: float  # the restarted group formed and rank 0 loaded the latest checkpoint
    next_epoch_s: float  # the first epoch after the fault completed (bounds the next step from above)


def small_run(data: Path, runs: Path, name: str, epochs: int = 4, ranks: int = 2) -> list[str]:
    """`trainer train` flags for a small run (a narrow network on one thread per rank): a few
    seconds per epoch of a few thousand images on 2 cores. Its global batch is the one nearest
    SMALL_BATCH that splits evenly over `ranks`."""
    batch = nearest_batch(SMALL_BATCH, ranks)
    return [
        "--data", str(data), "--runs", str(runs), "--run-name", name, "--epochs", str(epochs),
        "--width", "16", "--batch-size", str(batch), "--threads", "1", "--tta", "0",
        "--backend", contract.GLOO,
    ]  # fmt: skip


def make_dataset(folder: Path, train: int = 2048, test: int = 512) -> Path:
    """A synthetic CIFAR-format dataset in `folder` (what `--data` expects)."""
    cmd = [sys.executable, "-m", TRAINER_MODULE, "data", "synthetic", "--dir", str(folder)]
    subprocess.run([*cmd, "--train", str(train), "--test", str(test)], check=True, capture_output=True)
    return folder


@dataclass(frozen=True)
class Line:
    """One line a node's torchrun printed, with when it arrived."""

    at: float  # time.monotonic()
    node: int
    text: str


@dataclass
class DdpJob:
    """A training run across the testbed's machines; `start`, then inject faults, then `wait`."""

    layout: Layout
    trainer_args: Sequence[str]  # after `python -m trainer train`
    run_id: str
    collective_timeout_s: int
    # Each restart resumes from the checkpoint, so a generous budget only buys robustness: on a busy
    # machine a restarted rank can miss its peer's rendezvous and need one more round.
    max_restarts: int = 10
    procs: list[subprocess.Popen[str]] = field(default_factory=list)
    lines: list[Line] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def command(self, node: int) -> list[str]:
        machine = self.layout.machines[node]
        master = self.layout.machines[0].address
        return [
            "ip", "netns", "exec", machine.netns,
            sys.executable, "-m", "torch.distributed.run",
            f"--nnodes={self.layout.count}", "--nproc-per-node=1",
            "--rdzv-backend=c10d", f"--rdzv-endpoint={master}:{RDZV_PORT}", f"--rdzv-id={self.run_id}",
            # The namespace keeps the host's name, so torchrun cannot tell which node hosts the store.
            f"--rdzv-conf=is_host={int(node == 0)}", f"--local-addr={machine.address}",
            f"--max-restarts={self.max_restarts}", "--monitor-interval=1",
            "-m", TRAINER_MODULE, "train", *self.trainer_args,
        ]  # fmt: skip

    def environment(self) -> dict[str, str]:
        inherited = ("MASTER_", "PET_", contract.RANK, "WORLD_")
        env = {k: v for k, v in os.environ.items() if not k.startswith(inherited)}
        env.update(
            GLOO_SOCKET_IFNAME=network.GUEST_LINK,  # the namespace's only link besides loopback
            LAB_COLLECTIVE_TIMEOUT=str(self.collective_timeout_s),
            PYTHONPATH=str(Path(__file__).resolve().parents[2]),
            PYTHONUNBUFFERED="1",
        )
        # Torchrun's settings as the pods have them: a fresh rendezvous store per worker group.
        return worker_environment(env)

    def start(self) -> None:
        for node in range(self.layout.count):
            proc = subprocess.Popen(
                self.command(node),
                env=self.environment(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
            self.procs.append(proc)
            threading.Thread(target=self._follow, args=(node, proc), daemon=True).start()

    def _follow(self, node: int, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for text in proc.stdout:
            with self._lock:
                self.lines.append(Line(time.monotonic(), node, text.rstrip("\n")))

    def lines_since(self, index: int) -> tuple[list[Line], int]:
        """The lines printed since the first `index` ones, and the index to ask from next."""
        with self._lock:
            return self.lines[index:], len(self.lines)

    def find(self, pattern: str, after: float = 0.0) -> Line | None:
        """The first line matching the regular expression `pattern` printed after `after`."""
        regex = re.compile(pattern)
        with self._lock:
            return next((ln for ln in self.lines if ln.at > after and regex.search(ln.text)), None)

    def wait_for(self, pattern: str, timeout: float, after: float = 0.0) -> Line:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.find(pattern, after)
            if line is not None:
                return line
            if all(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.1)
        raise TestbedError(f"no line matching {pattern!r} within {timeout:.0f} s; output:\n{self.output()}")

    def worker_pids(self, node: int) -> list[int]:
        """The trainer processes torchrun runs on `node` (in sessions of their own)."""
        workers = processes.descendants(self.procs[node].pid)
        return [pid for pid in workers if TRAINER_MODULE in processes.command_line(pid)]

    def kill_worker(self, node: int) -> float:
        """SIGKILL the trainer on `node`; returns when it happened (time.monotonic())."""
        pids = self.worker_pids(node)
        if not pids:
            raise TestbedError(f"node {node} runs no trainer process to kill")
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        return time.monotonic()

    def cut_link(self, node: int, seconds: float) -> float:
        """Take `node`'s link down for `seconds`, then restore it; returns when it went down."""
        machine = self.layout.machines[node]
        network.set_link(machine, up=False)
        down_at = time.monotonic()
        try:
            time.sleep(seconds)
        finally:
            network.set_link(machine, up=True)
        return down_at

    def wait(self, timeout: float) -> list[int]:
        """Every torchrun's exit status; kills the job and raises when it runs past `timeout`."""
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.stop()
                raise TestbedError(
                    f"the job did not finish within {timeout:.0f} s; output:\n{self.output()}"
                ) from None
        return [p.returncode for p in self.procs]

    def stop(self) -> None:
        """Kill every torchrun and trainer of the job (safe to call twice)."""
        for proc in self.procs:
            processes.kill_tree(proc.pid)
            proc.wait()

    def recovery(self, fault_at: float, timeout: float) -> Recovery:
        """Wait for the job to get past a fault injected at `fault_at` and say how long it took."""
        resumed = self.wait_for(RESUMED_LINE, timeout, after=fault_at)
        epoch = self.wait_for(EPOCH_LINE, timeout, after=resumed.at)
        return Recovery(resumed.at - fault_at, epoch.at - fault_at)

    def output(self, last: int = 60) -> str:
        with self._lock:
            return "\n".join(f"[node{ln.node}] {ln.text}" for ln in self.lines[-last:])
