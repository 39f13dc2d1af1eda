"""A kubeconfig is hostile input (lab/kubeapi.py): no command runs without the operator's flag,
file references resolve against the kubeconfig's folder and are read as the lab reads files, a
file of several contexts makes the operator choose, and no secret reaches a message."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from lab.cluster.live_jobs import has_failed
from lab.config.loading import parse_config, read_stack_values, stack_file
from lab.kubeapi import MAX_FILE_BYTES, KubeconfigRefused, read
from tests.support.apiserver import recording_server
from tests.support.rules.pulumi_job_rules import job

SECRET = "s3cret-token-never-shown"


def write(
    folder: Path, users: list[dict[str, Any]], contexts: list[str] | None = None, **cluster: Any
) -> Path:
    """A kubeconfig in `folder`: a cluster, the users given, a context per name of `contexts`."""
    names = contexts or ["lab"]
    fields = {k.replace("_", "-"): v for k, v in cluster.items()}  # certificate_authority, ...
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443", **fields}}],
        "users": users,
        "contexts": [{"name": n, "context": {"cluster": "c", "user": users[0]["name"]}} for n in names],
    }
    path = folder / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path


def refusal(path: Path, **options: Any) -> str:
    with pytest.raises(KubeconfigRefused) as caught:
        read(path, **options)
    line = str(caught.value)
    assert "\n" not in line and SECRET not in line
    return line


@pytest.mark.parametrize(
    "runs",
    [
        {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "./plugin"}},
        {"auth-provider": {"name": "gcp", "config": {"cmd-path": "./plugin"}}},
    ],
    ids=["exec", "auth-provider"],
)
def test_no_command_runs_without_the_flag(runs: dict[str, Any], tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    plugin = tmp_path / "plugin"
    plugin.write_text(f"#!/bin/sh\ntouch {ran}\n")
    plugin.chmod(0o755)
    path = write(tmp_path, [{"name": "u", "user": {"token": SECRET, **runs}}])
    line = refusal(path)
    assert next(iter(runs)) in line and "allowKubeconfigCommands: true" in line, line
    assert not ran.exists()
    allowed = read(path, allow_commands=True)
    assert allowed.runs_commands


def test_an_exec_command_with_a_path_resolves_against_the_kubeconfig(tmp_path: Path) -> None:
    spec = {"apiVersion": "client.authentication.k8s.io/v1", "command": "bin/plugin"}
    path = write(tmp_path, [{"name": "u", "user": {"exec": spec}}])
    user = read(path, allow_commands=True).user
    assert user["exec"]["command"] == str(tmp_path / "bin/plugin")


def test_file_references_resolve_against_the_kubeconfig_not_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs/ca.crt").write_bytes(b"the CA")
    (tmp_path / "token").write_text(SECRET + "\n")
    path = write(
        tmp_path, [{"name": "u", "user": {"tokenFile": "token"}}], certificate_authority="certs/ca.crt"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    given = read(path)
    assert given.cluster["certificate-authority-data"] == base64.b64encode(b"the CA").decode()
    assert given.user == {"token": SECRET}


@pytest.mark.parametrize("kind", ["pipe", "oversized", "missing", "link to a pipe"])
def test_a_referenced_file_is_read_as_the_lab_reads_files(kind: str, tmp_path: Path) -> None:
    key = tmp_path / "client.key"
    if kind in {"pipe", "link to a pipe"}:
        os.mkfifo(tmp_path / "fifo")  # a read of it would wait forever
        key.symlink_to(tmp_path / "fifo")
        if kind == "pipe":
            key.unlink()
            os.mkfifo(key)
    elif kind == "oversized":
        key.write_bytes(b"k" * (MAX_FILE_BYTES + 1))
    user = {"client-certificate-data": base64.b64encode(b"cert").decode(), "client-key": "client.key"}
    line = refusal(write(tmp_path, [{"name": "u", "user": user}]))
    assert "client-key" in line and str(tmp_path) in line, line


def test_several_contexts_make_the_operator_choose(tmp_path: Path) -> None:
    path = write(tmp_path, [{"name": "u", "user": {"token": SECRET}}], contexts=["prod", "lab"])
    line = refusal(path)
    assert "prod, lab" in line and "kubeconfigContext: NAME" in line, line
    assert read(path, context="lab").context == "lab"
    assert "prod, lab" in refusal(path, context="staging")


def test_the_files_own_current_context_does_not_choose(tmp_path: Path) -> None:
    path = write(tmp_path, [{"name": "u", "user": {"token": SECRET}}], contexts=["prod", "lab"])
    doc = yaml.safe_load(path.read_text()) | {"current-context": "prod"}
    path.write_text(yaml.safe_dump(doc))
    assert "kubeconfigContext" in refusal(path)


@pytest.mark.parametrize(
    ("user", "cluster"),
    [
        ({"token": SECRET, "as": "system:admin"}, {}),  # impersonation the lab does not take
        ({"token": SECRET}, {"proxy-url": "http://proxy.example:3128"}),
        ({"client-key-data": SECRET}, {}),  # no base64
    ],
)
def test_secrets_stay_out_of_refusals(user: dict[str, Any], cluster: dict[str, Any], tmp_path: Path) -> None:
    refusal(write(tmp_path, [{"name": "u", "user": user}], **cluster))


def test_secrets_stay_out_of_a_yaml_error_and_the_repr(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(f"users:\n- user: {{token: {SECRET}\n")
    assert "not YAML" in refusal(path)
    given = read(write(tmp_path, [{"name": "u", "user": {"token": SECRET}}]))
    assert SECRET not in repr(given)


def test_a_stack_with_a_refused_kubeconfig_stops_at_its_configuration(tmp_path: Path) -> None:
    spec = {"apiVersion": "client.authentication.k8s.io/v1", "command": "plugin"}
    path = write(tmp_path, [{"name": "u", "user": {"exec": spec}}])
    values = read_stack_values(stack_file("example-cpu")) | {"kubeconfig": str(path)}
    with pytest.raises(ValueError, match=r"k8scifar:kubeconfig: .*allowKubeconfigCommands"):
        parse_config(values)
    assert parse_config(values | {"allowKubeconfigCommands": True}).allow_kubeconfig_commands


def test_a_kubeconfig_with_certificate_and_token_files_reads_live_jobs(tmp_path: Path) -> None:
    """The defect the hand-written client had: file references were never read, and the Job was
    silently taken for not failed."""
    with recording_server(tmp_path) as server:
        server.replies = {"/apis/batch/v1/namespaces/lab/jobs/build": (200, job("failed"))}
        (tmp_path / "token").write_text(SECRET)
        path = write(
            tmp_path,
            [{"name": "u", "user": {"tokenFile": "token"}}],
            server=f"https://127.0.0.1:{server.port}",
            certificate_authority=server.ca_file.name,
        )
        assert has_failed(read(path).text(), "lab", "build") is True
        headers = {k.lower(): v for k, v in server.requests[0].headers.items()}
        assert headers["authorization"] == f"Bearer {SECRET}"
