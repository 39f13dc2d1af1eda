"""The validate command: bad input is refused before any host is contacted; the report is readable."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest

from lab.validation import runner as validate
from lab.validation.parts import AFTER_RESET_MODULE, MODULES, Part, parse_parts

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="lab.validation.suite.test_host" name="test_os_and_kernel_are_supported[ansible://a]"/>
<testcase classname="lab.validation.suite.test_host" name="test_os_and_kernel_are_supported[ansible://b]"/>
<testcase classname="lab.validation.suite.test_host" name="test_forwarding_sysctls[ansible://b]">
<failure message="AssertionError: net.ipv4.ip_forward is 0, needs 1">trace</failure></testcase>
<testcase classname="lab.validation.suite.test_host" name="test_nvidia_smi_sees_the_configured_gpus[ansible://a]">
<skipped type="pytest.skip" message="a has no GPU configured (gpus: 0)">skip</skipped></testcase>
</testsuite></testsuites>"""


def test_junit_outcomes_name_check_host_and_reason() -> None:
    outcomes = validate.parse_junit(JUNIT)
    assert (
        validate.Outcome("test_forwarding_sysctls", "b", "failed", "net.ipv4.ip_forward is 0, needs 1")
        in outcomes
    )
    assert [o.status for o in outcomes].count("passed") == 2
    assert outcomes[-1].detail == "a has no GPU configured (gpus: 0)"


def test_report_puts_failures_first_and_groups_hosts() -> None:
    out = io.StringIO()
    validate.print_report(validate.parse_junit(JUNIT), out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "FAIL  forwarding sysctls: b"
    assert lines[1].strip() == "net.ipv4.ip_forward is 0, needs 1"
    assert "PASS  os and kernel are supported: a, b" in lines
    assert lines[-1] == "1 failed, 1 passed, 1 skipped"


REASON = "kubernetesInstall is skipped in this stack: no k3s binary can be downloaded here"
SKIPPED_FOR_ONE_REASON = (
    """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">"""
    + "".join(
        f'<testcase classname="c" name="test_{check}[ansible://{host}]"/>'
        for check in ("sysctls", "nfs_export", "packages", "apparmor")
        for host in ("node1", "node2")
    )
    + "".join(
        f'<testcase classname="c" name="test_{check}[ansible://{host}]">'
        f'<skipped type="pytest.skip" message="Skipped: {REASON}">skip</skipped></testcase>'
        for check in ("kubelet_runs", "nodes_ready", "device_plugin", "runtime_class", "registry_pull")
        for host in ("node1", "node2")
    )
    + "".join(
        f'<testcase classname="c" name="test_cluster_objects[ansible://node1]">'
        f'<skipped type="pytest.skip" message="Skipped: {reason}">skip</skipped></testcase>'
        for reason in (REASON, "checks in the cluster run once, through kubectl on the server node1")
    )
    + "</testsuite></testsuites>"
)


def test_a_reason_is_said_once_and_the_summary_counts_checks_as_the_lines_do() -> None:
    """Ten skips for one reason were ten lines, and 4 PASS lines stood over '8 passed'."""
    out = io.StringIO()
    validate.print_report(validate.parse_junit(SKIPPED_FOR_ONE_REASON), out)
    lines = out.getvalue().splitlines()
    assert out.getvalue().count(REASON) == 1, out.getvalue()
    passes = [line for line in lines if line.startswith("PASS")]
    skips = [line for line in lines if line.startswith("SKIP")]
    assert len(passes) == 4 and len(skips) == 2, lines
    # A check skipped on fewer nodes is named with its own.
    assert skips[0].startswith("SKIP  6 checks: kubelet runs on node1, node2;"), skips[0]
    assert skips[0].endswith("registry pull on node1, node2; cluster objects on node1"), skips[0]
    assert skips[1] == "SKIP  cluster objects: node1"
    assert lines[-1] == "4 passed, 6 skipped"


def test_bad_stack_is_refused_with_the_key(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.broken.yaml").write_text("config:\n  k8scifar:nodes: []\n")
    out = io.StringIO()
    assert validate.validate("broken", stacks_dir=tmp_path, out=out) == 2
    assert "k8scifar:nodes" in out.getvalue()


def test_missing_key_is_refused_before_connecting(tmp_path: Path) -> None:
    stack = (Path(validate.ROOT) / "stacks" / "Pulumi.testbed.yaml").read_text()
    (tmp_path / "Pulumi.nokey.yaml").write_text(
        stack.replace("/var/lib/k8scifar-testbed/lab/", str(tmp_path) + "/")
    )
    out = io.StringIO()
    assert validate.validate("nokey", stacks_dir=tmp_path, out=out) == 2
    assert f"k8scifar:ssh.keyPath: {tmp_path}/id_ed25519 does not exist" in out.getvalue()


def test_parts_are_named_by_words_and_a_wrong_word_is_named() -> None:
    assert parse_parts("hosts, cluster") == {Part.HOSTS, Part.CLUSTER}
    with pytest.raises(ValueError, match=r"^nodes is not a part to validate; name one or more of hosts,"):
        parse_parts("hosts,nodes")
    with pytest.raises(ValueError, match="is not a part to validate"):
        parse_parts(",")


def test_a_wrong_part_is_refused_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        validate.main(["--stack", "testbed", "--only", "everything"])
    assert exit_.value.code == 2
    assert "everything is not a part to validate" in capsys.readouterr().err


def test_parts_and_after_reset_are_refused_together_before_the_stack_is_read(tmp_path: Path) -> None:
    out = io.StringIO()
    code = validate.validate("absent", after_reset=True, parts={Part.HOSTS}, stacks_dir=tmp_path, out=out)
    assert code == 2
    assert out.getvalue() == (
        "--only names parts of a lab, --after-reset checks that none is left: give one of the two\n"
    )


def test_every_module_of_the_suite_is_a_part_or_the_reset_checks() -> None:
    """A module no part names would never run."""
    modules = {path.name for path in validate.SUITE.glob("test_*.py")}
    assert modules == {*MODULES.values(), AFTER_RESET_MODULE}


def test_parts_whose_checks_cannot_apply_are_refused_in_one_line() -> None:
    """The testbed stack skips the Kubernetes install: its cluster would be all skips and exit 0."""
    out = io.StringIO()
    assert validate.validate("testbed", parts={Part.CLUSTER, Part.WORKLOAD}, out=out) == 2
    assert out.getvalue() == (
        "--only cluster,workload: stack testbed skips kubernetesInstall, so there is no cluster to"
        " check; name hosts\n"
    )


def test_a_repeated_only_adds_its_parts_and_none_means_all() -> None:
    parser = argparse.ArgumentParser()
    validate.add_parts_option(parser)
    assert parser.parse_args(["--only", "hosts", "--only", "workload"]).only == {Part.HOSTS, Part.WORKLOAD}
    assert parser.parse_args([]).only is None


def test_no_part_at_all_is_a_caller_error() -> None:
    with pytest.raises(ValueError, match="name at least one part"):
        validate.validate("testbed", parts=set())
