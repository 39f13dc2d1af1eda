"""What `labctl hosts up` shows: a node it cannot reach is one line with what to check (the
words `labctl doctor` uses), never an `ok` for a task it could not have run there, nor the plays
that never ran; the run ends on one line naming the nodes and the full log."""

from __future__ import annotations

from pathlib import Path

from tests.support.labctl import labctl, node, write_stack
from tests.support.network import free_port
from tests.support.sshd import AGENT, SERVER


def test_unreachable_nodes_are_a_line_each_with_what_to_check(tmp_path: Path) -> None:
    key = tmp_path / "id_ed25519"
    key.write_text("not used: nothing answers on the port\n")
    port = free_port()
    nodes = [node("node-a", SERVER, "server"), node("node-b", AGENT, "agent")]
    write_stack(tmp_path, "gone", {"nodes": nodes, "ssh": {"keyPath": str(key), "port": port}})
    result = labctl("hosts", "up", "--stack", "gone", "--stacks-dir", tmp_path)
    assert result.code == 2 and "Traceback" not in result.err, result.err
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert len(lines) == 3, result.err
    for name, address in (("node-a", SERVER), ("node-b", AGENT)):
        (line,) = [line for line in lines if line.startswith(f"  unreachable {name} ")]
        assert line.startswith(f"  unreachable {name} (root@{address}, port {port}): cannot log in over SSH")
        assert (
            "Connection refused" in line
            and f"check the address, that the machine is up, and that {key}.pub" in line
        )
    assert lines[-1].startswith(
        "labctl: site.yml stopped: node-a, node-b could not be reached, as said above;"
    )
    log = Path(lines[-1].rsplit(" ", 1)[-1])
    assert "unreachable" in log.read_text(), "the full log holds every task's line"
