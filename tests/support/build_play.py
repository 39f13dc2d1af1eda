"""The part of the image build a kwok node cannot run, played by the test: the digest write.

On a real node the build pod's last container records the digest BuildKit pushed in a ConfigMap
(lab/cluster/digest_record.py), with the build's own ServiceAccount token; `pulumi up` reads that
ConfigMap once the Job completes. kwok runs no container, so this writes it the same way: as that
ServiceAccount, to the name the build's Role allows, while `up` waits for the Job.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from lab.cluster import digest_record
from lab.cluster.image import ACCOUNT
from lab.cluster.namespace import build_namespace
from lab.config import LabConfig
from lab.controlplane import kubeconfig, kubectl
from lab.controlplane.layout import Layout

PLAYED_DIGEST = "sha256:" + "5e" * 32


@dataclass
class DigestWrite:
    """The write, played in a thread until it succeeds or `stop` is set; `result` says how it went."""

    layout: Layout
    lab: LabConfig
    folder: Path
    stop: threading.Event = field(default_factory=threading.Event)
    result: list[str] = field(default_factory=list)
    thread: threading.Thread | None = None

    def _role_allows(self, namespace: str) -> str | None:
        """The ConfigMap name the build's Role lets it update: the digest's, once the Role exists."""
        found = kubectl(self.layout, "get", "role", ACCOUNT, "-n", namespace, "-o", "json", check=False)
        if found.returncode != 0:
            return None
        names = [n for rule in json.loads(found.stdout)["rules"] for n in rule.get("resourceNames", [])]
        return names[0] if names else None

    def _play(self) -> None:
        namespace = build_namespace(self.lab)
        while not self.stop.is_set():
            name = self._role_allows(namespace)
            if name is not None:
                break
            time.sleep(0.3)
        else:
            return
        token = kubectl(self.layout, "create", "token", ACCOUNT, "-n", namespace).stdout.strip()
        config = self.folder / "build.kubeconfig"
        config.write_text(kubeconfig.for_token(self.layout, ACCOUNT, token))
        record = json.dumps(digest_record.config_map(name, PLAYED_DIGEST))
        # The Role's binding may come a moment after the Role: until it does the write is refused.
        refused = "never tried"
        while not self.stop.is_set():
            create = ["create", "-n", namespace, "-f", "-"]
            done = kubectl(self.layout, *create, stdin=record, kubeconfig=config, check=False)
            if done.returncode == 0:
                self.result.append("written")
                return
            refused = done.stderr.strip()
            time.sleep(0.3)
        self.result.append(refused)

    def __enter__(self) -> DigestWrite:
        self.thread = threading.Thread(target=self._play, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=30)
