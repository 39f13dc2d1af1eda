"""`labctl dashboard`: a kubectl port-forward to Grafana through the stack's kubeconfig, the way to
the password said and the password never printed, nothing left behind; one line when it cannot.

`kubectl` and `pulumi` are stand-ins that record how they were called (no cluster or Pulumi state
runs here): kubectl says what a real `kubectl port-forward` says once it listens ("Forwarding
from 127.0.0.1:PORT -> PORT", kubectl's pkg/cmd/portforward) and stays until stopped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from lab.config import read_stack_values, stack_file
from tests.support.labctl import Result, assert_one_line_error, labctl, write_stack

SECRET_MARK = "marker-kubeconfig-secret"
KUBECTL = """#!/bin/sh
echo "pid $$" >> "$LOG"
echo "args $*" >> "$LOG"
for arg; do
  case "$arg" in --kubeconfig=*)
    file="${arg#--kubeconfig=}"
    echo "file $file $(stat -c %a "$file")" >> "$LOG"
    cat "$file" >> "$LOG" ;;
  esac
done
if [ -n "$KUBECTL_FAILS" ]; then echo "$KUBECTL_FAILS" >&2; exit 1; fi
echo "Forwarding from 127.0.0.1:${SHOWN_PORT:-3000} -> 3000"
echo "Forwarding from [::1]:${SHOWN_PORT:-3000} -> 3000"
exec sleep 300
"""
PULUMI = f"""#!/bin/sh
echo "pulumi $*" >> "$LOG"
printf 'apiVersion: v1\\nkind: Config\\n# {SECRET_MARK}\\n'
"""


@pytest.fixture
def bench(tmp_path: Path) -> dict[str, object]:
    """A stack with the monitoring stack (none of .lab/ for it), and the stand-ins on PATH."""
    stack = f"dash-{uuid.uuid4().hex[:8]}"
    write_stack(tmp_path / "stacks", stack, read_stack_values(stack_file("example-cpu")))
    tools = tmp_path / "bin"
    tools.mkdir()
    for name, script in (("kubectl", KUBECTL), ("pulumi", PULUMI)):
        (tools / name).write_text(script)
        (tools / name).chmod(0o755)
    log = tmp_path / "calls.log"
    env = os.environ | {
        "PATH": f"{tools}:{os.environ['PATH']}",
        "LOG": str(log),
        "COLUMNS": "250",
        "TERM": "dumb",
    }
    return {"stack": stack, "stacks": tmp_path / "stacks", "env": env, "log": log, "bin": tools}


def _start(bench: dict[str, object], *extra: str) -> subprocess.Popen[str]:
    """`labctl dashboard` in a session of its own, as a terminal runs it."""
    command = [sys.executable, "-m", "lab.cli", "dashboard", "--stack", str(bench["stack"])]
    return subprocess.Popen(
        [*command, "--stacks-dir", str(bench["stacks"]), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=bench["env"],  # type: ignore[arg-type]
        start_new_session=True,
    )


def _until_open(proc: subprocess.Popen[str]) -> list[str]:
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("Ctrl-C ends the port-forward"):
            return seen
    pytest.fail(f"labctl dashboard ended early: {''.join(seen)}{proc.stderr.read() if proc.stderr else ''}")


def _logged(log: Path, key: str) -> list[str]:
    return [line.split(" ", 1)[1] for line in log.read_text().splitlines() if line.startswith(key + " ")]


def test_it_forwards_through_the_stack_kubeconfig_and_never_prints_a_secret(bench: dict) -> None:
    before = set(Path(tempfile.gettempdir()).glob("labctl-dashboard-*"))
    proc = _start(bench)
    try:
        shown = "".join(_until_open(proc))
        log: Path = bench["log"]
        stack = bench["stack"]
        # The kubeconfig is the stack's secret output, read with `pulumi stack output`.
        assert _logged(log, "pulumi") == [f"stack output --stack {stack} --show-secrets kubeconfig"]
        (args,) = _logged(log, "args")
        (file,) = _logged(log, "file")
        path, mode = file.rsplit(" ", 1)
        assert args == (
            f"--kubeconfig={path} --namespace k8scifar-monitoring port-forward --address=127.0.0.1"
            " svc/grafana 3000:80"
        )
        # kubectl read it from a file only this user may read, which is gone once it listens.
        assert mode == "600" and SECRET_MARK in log.read_text()
        assert not Path(path).exists()
        assert "Grafana of stack" in shown and "http://127.0.0.1:3000 (folder k8scifar)" in shown
        assert "user:     admin" in shown
        assert f"`pulumi stack output --stack {stack} --show-secrets grafanaAdminPassword` prints it" in shown
        assert SECRET_MARK not in shown
        (pid,) = map(int, _logged(log, "pid"))
        proc.send_signal(signal.SIGINT)  # Ctrl-C: how the forward ends
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "the port-forward to Grafana is closed" in out and SECRET_MARK not in out + err
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
    assert set(Path(tempfile.gettempdir()).glob("labctl-dashboard-*")) == before


def test_ctrl_c_in_its_terminal_closes_it_cleanly(bench: dict) -> None:
    """A terminal's Ctrl-C reaches kubectl too, which may end first: still a clean close."""
    proc = _start(bench)
    try:
        _until_open(proc)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "the port-forward to Grafana is closed" in out


def test_a_given_kubeconfig_is_used_as_it_is(bench: dict, tmp_path: Path) -> None:
    mine = tmp_path / "mine.yaml"
    mine.write_text("apiVersion: v1\nkind: Config\n")
    bench["env"]["SHOWN_PORT"] = "41234"  # the port kubectl picked
    proc = _start(bench, "--kubeconfig", str(mine), "--port", "0")
    try:
        assert "http://127.0.0.1:41234 " in "".join(_until_open(proc))
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    (args,) = _logged(bench["log"], "args")
    assert args.startswith(f"--kubeconfig={mine} ") and args.endswith(" svc/grafana :80")
    assert _logged(bench["log"], "pulumi") == [] and mine.exists()


def _run(bench: dict, *extra: str, **env: str) -> Result:
    command = [sys.executable, "-m", "lab.cli", "dashboard", "--stack", bench["stack"]]
    done = subprocess.run(
        [*command, "--stacks-dir", str(bench["stacks"]), *extra],
        capture_output=True,
        text=True,
        env=bench["env"] | env,
        timeout=120,
        check=False,
    )
    return Result(done.returncode, done.stdout, done.stderr)


def test_a_port_kubectl_cannot_take_is_one_line(bench: dict) -> None:
    before = set(Path(tempfile.gettempdir()).glob("labctl-dashboard-*"))
    busy = "error: unable to listen on any of the requested ports: [{3000 3000}]"
    result = _run(bench, KUBECTL_FAILS=busy)
    assert_one_line_error(result, f"kubectl port-forward to Grafana failed: {busy}", "choose another --port")
    assert SECRET_MARK not in result.out + result.err
    assert set(Path(tempfile.gettempdir()).glob("labctl-dashboard-*")) == before


def test_without_pulumi_or_a_kept_kubeconfig_it_says_what_to_pass(bench: dict) -> None:
    (bench["bin"] / "pulumi").unlink()
    result = _run(bench, PATH=str(bench["bin"]))  # kubectl, and no pulumi anywhere
    assert_one_line_error(result, "Pulumi CLI", "is not installed", "--kubeconfig PATH", "--print")


def test_print_says_where_grafana_is_and_starts_nothing(bench: dict) -> None:
    result = _run(bench, "--print")
    assert result.code == 0, result.err
    assert "Service grafana in k8scifar-monitoring, port 80" in result.out
    assert "port-forward --address=127.0.0.1 svc/grafana 3000:80" in result.out
    assert "grafanaAdminPassword` prints it" in result.out
    assert not bench["log"].exists()  # neither kubectl nor pulumi ran


@pytest.mark.parametrize(
    ("stack", "values", "said"),
    [
        ("testbed", None, "skips the Kubernetes install, so it has no Grafana"),
        ("quiet", {"observability": {"enabled": False}}, "k8scifar:observability.enabled is false"),
    ],
)
def test_a_lab_without_grafana_is_one_line(bench: dict, stack: str, values: dict | None, said: str) -> None:
    if values is not None:
        write_stack(bench["stacks"], stack, read_stack_values(stack_file("example-cpu")) | values)
        where = ["--stacks-dir", str(bench["stacks"])]
    else:
        where = []
    result = labctl("dashboard", "--stack", stack, *where)
    assert_one_line_error(result, said)
