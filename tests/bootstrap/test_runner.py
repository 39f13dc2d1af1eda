"""lab.bootstrap.playbook.run_playbook against this machine with real ansible-runner and ansible-playbook."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from lab.bootstrap.playbook import (
    PROCESS_MODULE,
    SECRETS_PREFIX,
    PlaybookError,
    PlaybookResult,
    run_playbook,
)
from lab.bootstrap.run_cleanup import control_dir, stop_playbook
from tests.support.pretend_bootstrap import local_inventory, make_ansible_dir
from tests.support.processes import mentioning
from tests.support.sshd import SERVER, Sshd

TOKEN = "abcdef.0123456789abcdef"
SECRET_MARKERS = [TOKEN, "S2V5LVNFQ1JFVC1NQVJLRVI", "Key-SECRET-MARKER", "Env-SECRET-MARKER"]


def _site(ansible_dir: Path, target: Path, work: Path, hosts: list[str], **options: Any) -> PlaybookResult:
    """site.yml of the throw-away tree, run the way lab.bootstrap.resource runs it (token as a secret
    variable)."""
    options.setdefault("secret_vars", {"lab_k3s_agent_token": TOKEN})
    options.setdefault("extravars", {"lab_stack": "demo"})
    inventory = options.pop("inventory", None) or local_inventory(target, hosts)
    playbook = options.pop("playbook", "site.yml")
    return run_playbook(work, playbook, inventory, ansible_dir=ansible_dir, **options)


def _files_containing(root: Path, needles: list[str]) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file():
            text = path.read_bytes().decode(errors="replace")
            found += [f"{path.relative_to(root)}: {n}" for n in needles if n in text]
    return found


def test_a_run_reports_counts_and_set_stats_and_converges(
    ansible_dir: Path, target: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    first = _site(ansible_dir, target, tmp_path / "work", ["node-a", "node-b"])
    assert first.changed == {"node-a": 2, "node-b": 2}
    assert (target / "node-b").read_text() == "demo 10.9.0.2\n"
    assert (target / "node-a.token").read_text() == TOKEN
    assert "Key-SECRET-MARKER" not in first.stats["lab_kubeconfig"]  # base64 inside, as on a server
    assert "S2V5LVNFQ1JFVC1NQVJLRVI" in first.stats["lab_kubeconfig"]
    assert first.stats["lab_nodes"] == {"node-a": {"address": "10.9.0.1"}, "node-b": {"address": "10.9.0.2"}}

    # A line per play and node, and the note a task left said once for both nodes.
    progress = capfd.readouterr().err.splitlines()
    assert progress == [
        "  changed     node-a: Bootstrap the pretend node: 2 ok, 1 changed, 3 hidden (no_log)",
        "  changed     node-b: Bootstrap the pretend node: 2 ok, 1 changed, 3 hidden (no_log)",
        "              node-a, node-b: skipping install: a pretend node",
    ]
    # Every task's line is in the run's full log.
    log = Path(first.log).read_text()
    assert "changed     node-a: Write the node's marker" in log
    assert "RECAP node-b: ok=6 changed=2 skipped=0 failed=0" in log
    assert "ok          node-a: Say why nothing is installed: skipping install: a pretend node" in log
    assert Path(first.log).stat().st_mode & 0o777 == 0o600

    second = _site(ansible_dir, target, tmp_path / "work", ["node-a", "node-b"], quiet=True)
    assert second.total_changed == 0
    assert capfd.readouterr().err == ""
    third = _site(ansible_dir, target, tmp_path / "work", ["node-a", "node-b"], verbose=True)
    assert capfd.readouterr().err == Path(third.log).read_text(), "--verbose shows the whole log"


def test_secrets_stay_out_of_the_artifacts(
    ansible_dir: Path, target: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "Env-SECRET-MARKER")
    work = tmp_path / "work"
    result = _site(ansible_dir, target, work, ["node-a"], quiet=True)
    assert "S2V5LVNFQ1JFVC1NQVJLRVI" in result.stats["lab_kubeconfig"]
    artifacts = list((work / "artifacts").rglob("*"))
    assert any(p.name == "command" for p in artifacts), "ansible-runner wrote no artifacts to check"
    assert _files_containing(work, SECRET_MARKERS) == []
    assert not (work / "env").exists(), "env files must be suppressed"
    assert not list(work.glob("secrets-*")), "the secret variables file outlived the run"


def test_the_artifact_check_finds_a_leaked_secret(ansible_dir: Path, target: Path, tmp_path: Path) -> None:
    """The check above can fail: a token passed as a plain extra variable lands in the artifacts."""
    work = tmp_path / "work"
    leaky = {"lab_stack": "demo", "lab_k3s_agent_token": TOKEN}
    _site(ansible_dir, target, work, ["node-a"], quiet=True, secret_vars=None, extravars=leaky)
    assert any(TOKEN in hit for hit in _files_containing(work, SECRET_MARKERS))


def test_a_killed_run_leaves_no_secret(
    ansible_dir: Path, target: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL the playbook process half-way: its secrets file goes, the environment never got in.

    A stale secrets file from an earlier killed run is gone by the time the next run is under way.
    """
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "Env-SECRET-MARKER")
    work = tmp_path / "work"
    stale = work / f"{SECRETS_PREFIX}stale"
    stale.mkdir(parents=True)
    (stale / "vars.json").write_text(json.dumps({"lab_join_token": TOKEN}))
    failure: list[BaseException] = []

    def slow_run() -> None:
        try:
            _site(ansible_dir, target, work, ["node-a"], quiet=True, playbook="slow.yml")
        except PlaybookError as err:
            failure.append(err)

    run = threading.Thread(target=slow_run)
    run.start()
    deadline = time.monotonic() + 60
    while not (target / "started").exists():
        assert run.is_alive() and time.monotonic() < deadline, f"the slow run never got going: {failure}"
        time.sleep(0.2)
    live = [p.name for p in work.glob(f"{SECRETS_PREFIX}*")]
    assert len(live) == 1 and live != [stale.name], f"expected only the live run's secrets, found {live}"
    (process,) = [pid for pid, parent in mentioning(PROCESS_MODULE).items() if parent == os.getpid()]
    os.kill(process, signal.SIGKILL)
    run.join(timeout=60)
    assert not run.is_alive()
    assert mentioning(str(work)) == {}, "ansible-playbook outlived the killed run"
    assert "killed by SIGKILL" in str(failure[0])
    assert (target / "node-a.token").read_text() == TOKEN, "the run was killed before it used the token"
    assert list(work.glob(f"{SECRETS_PREFIX}*")) == []
    assert _files_containing(work, SECRET_MARKERS) == []


# The operator's side of a run in a process of its own, as `pulumi up` or `labctl` would hold it.
OPERATOR = """\
import json, sys
from pathlib import Path
from lab.bootstrap.playbook import run_playbook
request = json.loads(Path(sys.argv[1]).read_text())
run_playbook(Path(request["work"]), "slow.yml", request["inventory"], {"lab_stack": "demo"},
             secret_vars={"lab_k3s_agent_token": request["token"]}, ansible_dir=Path(request["ansible_dir"]),
             quiet=True)
"""


def _operator_run(ansible_dir: Path, target: Path, tmp_path: Path, work: Path) -> subprocess.Popen[bytes]:
    """slow.yml started from a process group of its own, returned once it holds the token."""
    request = tmp_path / "request.json"
    inventory = local_inventory(target, ["node-a"])
    request.write_text(
        json.dumps(
            {"work": str(work), "inventory": inventory, "token": TOKEN, "ansible_dir": str(ansible_dir)}
        )
    )
    script = tmp_path / "operator.py"
    script.write_text(OPERATOR)
    env = {**os.environ, "PULUMI_CONFIG_PASSPHRASE": "Env-SECRET-MARKER", "PYTHONPATH": str(Path.cwd())}
    operator = subprocess.Popen([sys.executable, str(script), str(request)], env=env, start_new_session=True)
    deadline = time.monotonic() + 60
    while not (target / "started").exists():
        assert operator.poll() is None and time.monotonic() < deadline, "the slow run never got going"
        time.sleep(0.2)
    assert list(work.glob(f"{SECRETS_PREFIX}*")), "the run holds no secrets file to leave behind"
    return operator


def _working_in(work: Path) -> list[int]:
    """Processes of a run in `work`: the playbook process runs there, ansible-playbook names it."""
    found = list(mentioning(str(work)))
    for cwd in Path("/proc").glob("[0-9]*/cwd"):
        try:
            if cwd.resolve() == work.resolve():
                found.append(int(cwd.parent.name))
        except OSError:
            continue
    return found


def _wait_until_gone(work: Path, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := _working_in(work)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def test_a_terminated_run_cleans_up_after_itself(ansible_dir: Path, target: Path, tmp_path: Path) -> None:
    """SIGTERM to the operator's whole process group (a `kill`, a shutdown) half-way through a run:
    the run is cancelled and, with no process left to do it later, every secret is gone."""
    work = tmp_path / "work"
    operator = _operator_run(ansible_dir, target, tmp_path, work)
    os.killpg(operator.pid, signal.SIGTERM)
    operator.wait(timeout=60)
    assert _wait_until_gone(work, 30) == [], "a process of the terminated run outlived it"
    assert list(work.glob(f"{SECRETS_PREFIX}*")) == [], "the secrets file outlived the terminated run"
    assert not control_dir(work).exists(), "its ssh connections' folder outlived the terminated run"
    assert _files_containing(work, SECRET_MARKERS) == []


def test_a_killed_run_is_cleaned_up_by_the_next(ansible_dir: Path, target: Path, tmp_path: Path) -> None:
    """SIGKILL to the operator's whole process group half-way: nothing can clean up then, so the
    next run does, before it starts: the secrets file goes and the orphaned ansible-playbook,
    which still holds the token, is stopped."""
    work = tmp_path / "work"
    operator = _operator_run(ansible_dir, target, tmp_path, work)
    os.killpg(operator.pid, signal.SIGKILL)
    operator.wait(timeout=60)
    _site(ansible_dir, target, work, ["node-a"], quiet=True)
    assert mentioning(str(work)) == {}, "the orphaned ansible-playbook of the killed run still runs"
    assert list(work.glob(f"{SECRETS_PREFIX}*")) == []
    assert _files_containing(work, SECRET_MARKERS) == []


def test_a_failing_task_names_host_task_and_message(ansible_dir: Path, target: Path, tmp_path: Path) -> None:
    with pytest.raises(PlaybookError) as caught:
        run_playbook(
            tmp_path / "work",
            "failing.yml",
            local_inventory(target, ["node-a"]),
            ansible_dir=ansible_dir,
            quiet=True,
        )
    message = str(caught.value)
    assert "failing.yml failed" in message
    assert "host node-a, task 'Read a file that is not there'" in message
    assert "missing-file" in message
    assert [f.host for f in caught.value.failures] == ["node-a"]


def test_a_failure_is_shown_in_full_and_the_play_it_stopped_is_not_called_ok(
    ansible_dir: Path, target: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(PlaybookError) as caught:
        run_playbook(
            tmp_path / "work", "failing.yml", local_inventory(target, ["node-a"]), ansible_dir=ansible_dir
        )
    shown = capfd.readouterr().err.splitlines()
    (failure,) = caught.value.failures
    assert shown == [f"  failed      node-a: Read a file that is not there: {failure.message}"]
    assert "missing-file" in failure.message
    assert "ok          node-a: A task that works" in Path(caught.value.log).read_text()


def test_an_unreachable_host_is_one_line_with_what_to_check(
    ansible_dir: Path, target: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    inventory = local_inventory(target, ["node-a"])
    inventory["all"]["vars"].update(
        ansible_connection="ssh", ansible_host="127.0.0.1", ansible_port=1, ansible_user="nobody"
    )
    with pytest.raises(PlaybookError) as caught:
        _site(ansible_dir, target, tmp_path / "work", ["node-a"], inventory=inventory, playbook="failing.yml")
    # One line for the node, with what to check, as `labctl doctor` says it; nothing about the
    # tasks or plays that never ran on it.
    line = "node-a (nobody@127.0.0.1, port 1): cannot log in over SSH"
    assert caught.value.failures[0].message.startswith(line)
    shown = capfd.readouterr().err.splitlines()
    assert len(shown) == 1 and shown[0].startswith(f"  unreachable {line}"), shown
    assert "check the address, that the machine is up" in shown[0] and "Connection refused" in shown[0]


def _ssh_masters() -> set[int]:
    """ssh connection masters in this thread's network namespace (ssh renames each `ssh: SOCKET
    [mux]`): inside the sshd fixture that is the test's own, where every process it starts runs,
    so masters that other tests running meanwhile open to the test machines are not counted."""
    here = os.stat("/proc/thread-self/ns/net").st_ino
    found = set()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes()
            inside = os.stat(cmdline.parent / "ns" / "net").st_ino == here
        except OSError:
            continue
        if inside and text.startswith(b"ssh: ") and b"[mux]" in text:
            found.add(int(cmdline.parent.name))
    return found


@pytest.mark.parametrize("deep_tmpdir", [False, True], ids=["tmpdir", "deep-tmpdir"])
def test_a_run_over_ssh_leaves_no_connection_behind(
    ansible_dir: Path,
    target: Path,
    tmp_path: Path,
    sshd: Sshd,
    deep_tmpdir: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ansible keeps each node's ssh connection open for 60 s after its last task (ControlPersist):
    no such master, holding a login to the node, outlives the run that opened it. An operator's
    $TMPDIR too deep for ssh's sockets (the Pulumi engine's, a CI runner's) still lets it log in."""
    if deep_tmpdir:
        deep = tmp_path / ("d" * 60) / ("e" * 40)
        deep.mkdir(parents=True)
        monkeypatch.setenv("TMPDIR", str(deep))
        monkeypatch.setattr(tempfile, "tempdir", None)
        assert len(str(deep)) + len("/k8scifar-ssh-0123456789ab/0123456789.0123456789abcdef") > 107
    inventory = local_inventory(target, ["node-a"])
    inventory["all"]["vars"].update(
        ansible_connection="ssh",
        ansible_host=SERVER,
        ansible_port=sshd.port,
        ansible_user="root",
        ansible_ssh_private_key_file=str(sshd.key),
        ansible_ssh_common_args="-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
    )
    before = _ssh_masters()
    work = tmp_path / "work"
    _site(ansible_dir, target, work, ["node-a"], quiet=True, inventory=inventory)
    assert _ssh_masters() - before == set(), "an ssh connection master outlived the run"
    assert not control_dir(work).exists()


def test_clean_up_kills_only_the_runs_own_processes(ansible_dir: Path, target: Path, tmp_path: Path) -> None:
    """Processes that are no part of a run but name the run's inventory or its ssh control folder on
    their command lines (anyone can start one) outlive the run's clean-up, before and after it."""
    work = tmp_path / "work"
    (work / "inventory").mkdir(parents=True)
    bystanders = [
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", named])
        for named in (f"{work.resolve()}/inventory/hosts.json", f"{control_dir(work)}/socket [mux]")
    ]
    try:
        _site(ansible_dir, target, work, ["node-a"], quiet=True)
        stop_playbook(None, work)
        for bystander in bystanders:
            assert bystander.poll() is None, f"the clean-up killed {bystander.args[-1]!r}, not the run's"
    finally:
        for bystander in bystanders:
            bystander.kill()
            bystander.wait()


FORKS = """\
- name: Report the run's workers and hosts
  hosts: all
  gather_facts: false
  tasks:
    - name: Return them
      ansible.builtin.set_stats:
        data: {forks: "{{ ansible_forks }}", hosts: "{{ ansible_play_hosts_all }}"}
        per_host: false
        aggregate: false
      run_once: true
"""


def test_every_node_gets_a_worker_and_a_limit_narrows_the_plays(tmp_path: Path) -> None:
    """Twelve nodes, more than ansible.cfg's forks: all twelve run each task at once (agents
    join together); with a limit the plays run on the named nodes only."""
    ansible_dir = make_ansible_dir(tmp_path / "ansible", forks=FORKS)
    names = [f"node-{i}" for i in range(12)]
    inventory = local_inventory(tmp_path / "target", names)
    work = tmp_path / "work"
    run = run_playbook(work, "forks.yml", inventory, ansible_dir=ansible_dir, quiet=True)
    assert int(run.stats["forks"]) == len(names) and sorted(run.stats["hosts"]) == sorted(names)
    limit = ["node-3", "node-7"]
    limited = run_playbook(work, "forks.yml", inventory, ansible_dir=ansible_dir, quiet=True, limit=limit)
    assert sorted(limited.stats["hosts"]) == ["node-3", "node-7"]


def test_an_empty_limit_is_refused_not_run_on_every_host(tmp_path: Path) -> None:
    """ansible-runner passes any limit but None as `--limit`, and Ansible drops an empty pattern and
    restricts nothing (ansible-core `InventoryManager.subset`, `get_hosts`): an empty list of nodes
    would run the plays on every host."""
    ansible_dir = make_ansible_dir(tmp_path / "ansible", forks=FORKS)
    inventory = local_inventory(tmp_path / "target", ["node-0", "node-1"])
    with pytest.raises(ValueError, match="no host"):
        run_playbook(tmp_path / "work", "forks.yml", inventory, ansible_dir=ansible_dir, quiet=True, limit=[])
    assert not (tmp_path / "work").exists(), "nothing may start"
