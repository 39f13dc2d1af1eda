"""Measure the link between two nodes the way DDP uses it: a TCP stream from one node to the other.

The operator starts a receiver on one node and a sender on the other, both with the node's own
python3 over SSH, so the bytes cross the lab's network and never the operator's link.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from rich.table import Table

from lab.cli.common.console import CliError
from lab.config import Node
from lab.remote.ssh import Remote, SshError

RECEIVER = """
import json, socket, sys, time
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind((sys.argv[1], int(sys.argv[2])))
server.listen(1)
server.settimeout(float(sys.argv[3]))
print("ready", flush=True)
conn, _ = server.accept()
received, started = 0, None
while chunk := conn.recv(1 << 20):
    started = started or time.perf_counter()
    received += len(chunk)
print(json.dumps({"bytes": received, "seconds": time.perf_counter() - (started or time.perf_counter())}))
"""

SENDER = """
import socket, sys
chunk = bytes(1 << 20)
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[4])) as conn:
    for _ in range(int(sys.argv[3])):
        conn.sendall(chunk)
"""


@dataclass(frozen=True)
class Measurement:
    sender: str
    receiver: str
    megabytes: float
    seconds: float

    @property
    def bits_per_second(self) -> float:
        return self.megabytes * 2**20 * 8 / self.seconds

    def describe(self) -> str:
        return (
            f"{self.sender} -> {self.receiver}: {self.bits_per_second / 1e9:.2f} Gbit/s"
            f" ({self.megabytes:.0f} MiB in {self.seconds:.2f} s)"
        )


def _python(script: str, *args: object) -> str:
    return " ".join(["python3", "-c", shlex.quote(script), *(shlex.quote(str(a)) for a in args)])


def measure(sender: Remote, receiver: Remote, port: int, megabytes: int, timeout: float = 60) -> Measurement:
    """Stream `megabytes` MiB from `sender` to `receiver`'s address on `port` and time it there."""
    address = receiver.node.address
    listening = receiver.popen(_python(RECEIVER, address, port, timeout))
    try:
        ready = listening.stdout.readline().strip() if listening.stdout else ""
        if ready != "ready":
            _, err = listening.communicate(timeout=timeout)
            if listening.returncode == 255:
                raise SshError(receiver.unreachable(err))
            raise CliError(f"cannot listen on {address}:{port} on {receiver.node.name}: {_last(err)}")
        sent = sender.run(_python(SENDER, address, port, megabytes, timeout), timeout=timeout)
        if sent.returncode != 0:
            raise CliError(
                f"{sender.node.name} cannot reach {address}:{port}: {_last(sent.stderr)};"
                " open the port in the firewall between the nodes"
            )
        out, _ = listening.communicate(timeout=timeout)
    finally:
        if listening.poll() is None:
            listening.kill()
            listening.wait()
    result = json.loads(out)
    return Measurement(sender.node.name, receiver.node.name, result["bytes"] / 2**20, result["seconds"])


def _last(text: str) -> str:
    return (text.strip().splitlines() or ["no error output"])[-1]


def matrix(nodes: Sequence[Node], links: Sequence[Measurement]) -> Table:
    """The measured links as a table of Gbit/s, a row per sending node and a column per receiving
    one; each pair is measured one way, the way doctor streamed it."""
    rate = {(m.sender, m.receiver): f"{m.bits_per_second / 1e9:.2f}" for m in links}
    table = Table(title="Gbit/s, row to column", title_justify="left")
    table.add_column("from")
    for node in nodes:
        table.add_column(node.name, justify="right")
    for sender in nodes:
        cells = ["-" if to == sender else rate.get((sender.name, to.name), "") for to in nodes]
        table.add_row(sender.name, *cells)
    return table
