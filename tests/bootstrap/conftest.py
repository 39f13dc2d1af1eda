"""Fixtures for the host bootstrap tests: the pretend node of tests/support/pretend_bootstrap.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.pretend_bootstrap import FAILING, KUBECONFIG, RESET, SITE, SLOW, make_ansible_dir
from tests.support.tiers import costly


@pytest.fixture
@costly("a throw-away Ansible tree that the bootstrap's runner runs for real")
def ansible_dir(tmp_path: Path) -> Path:
    """An Ansible tree shaped like ansible/ with pretend playbooks, for the runner to run."""
    return make_ansible_dir(tmp_path / "ansible", site=SITE, reset=RESET, failing=FAILING, slow=SLOW)


@pytest.fixture
def target(tmp_path: Path) -> Path:
    """The pretend machine's disk, holding the kubeconfig its Kubernetes wrote."""
    path = tmp_path / "target"
    path.mkdir()
    (path / "k3s.yaml").write_text(KUBECONFIG)
    return path
