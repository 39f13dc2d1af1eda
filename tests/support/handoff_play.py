"""Rank 0's hand-off at the end of a run, played by the test: kwok runs no trainer, so the
trainer's own code (trainer/pod/handoff.py) runs here, inside the control plane's namespace, with
a token of the ServiceAccount the training pods run as and the files the kubelet mounts for it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from lab.cluster import training
from lab.config import LabConfig
from lab.controlplane import kubeconfig, kubectl, netns
from lab.controlplane.layout import APISERVER_PORT, HOST, Layout
from lab.controlplane.pki import Pki
from lab.paths import ROOT
from trainer import contract
from trainer.pod import handoff

RELEASE = f"from {handoff.__name__} import release; print(release())"


def _token(layout: Layout, lab: LabConfig) -> tuple[str, str]:
    """The ServiceAccount the training pods run as (read from the live StatefulSet) and a token of it."""
    found = kubectl(layout, "get", "statefulset", training.NAME, "-n", lab.namespace, "-o", "json")
    account = str(json.loads(found.stdout)["spec"]["template"]["spec"]["serviceAccountName"])
    return account, kubectl(layout, "create", "token", account, "-n", lab.namespace).stdout.strip()


def account_kubeconfig(layout: Layout, lab: LabConfig, folder: Path) -> Path:
    """A kubeconfig that is the training pods' ServiceAccount and nothing else."""
    path = folder / "trainer.kubeconfig"
    path.write_text(kubeconfig.for_token(layout, *_token(layout, lab)))
    return path


def hand_off(layout: Layout, lab: LabConfig, folder: Path) -> subprocess.CompletedProcess[str]:
    """Rank 0's `handoff.release()`, as its pod runs it once the run is complete."""
    mounted = folder / "serviceaccount"
    mounted.mkdir(exist_ok=True)
    (mounted / "token").write_text(_token(layout, lab)[1])
    (mounted / "namespace").write_text(lab.namespace)
    (mounted / "ca.crt").write_bytes(Pki(layout.pki).cert("ca").read_bytes())
    env = {
        **os.environ,
        # A pod is given the `kubernetes` Service's address; here the API server's own.
        handoff.HOST_VARIABLE: HOST,
        handoff.PORT_VARIABLE: str(APISERVER_PORT),
        handoff.ACCOUNT_DIR_VARIABLE: str(mounted),
        contract.POD_NAME: f"{training.NAME}-0",
    }
    return subprocess.run(
        [*netns.inside(layout), sys.executable, "-c", RELEASE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
