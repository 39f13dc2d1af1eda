"""Whether a Job that `pulumi up` awaits has failed for good, read from the cluster as the program runs.

pulumi-kubernetes decides a Job's fate in two places (provider/pkg/provider/provider.go Diff;
provider/pkg/await/job.go; the await's checker is provider/pkg/await/checker/job/check.go):

- a Job that failed, or whose await was cut short (Ctrl-C, a timeout), stays in the state with an
  init error, and the engine runs an empty update for it on the next `up` (pulumi/pulumi
  pkg/resource/deploy/step_generator.go), which awaits the live Job again: a running Job is
  waited for, a failed one fails `up` at once, every time, since the Job controller never runs a
  Job with a Failed condition again;
- with the annotation `pulumi.com/replaceUnready: "true"` in the new inputs, Diff reads the live
  Job and replaces it (deleting it first, as it keeps its name) whenever the Job is not complete:
  a failed Job and a running one alike.

So the annotation alone kills a 60-minute image build or a 48-hour sweep that a re-run of `up`
finds running, and without it a failed Job never runs again. The program sets the annotation
only on a Job whose Failed condition is True when the program runs, a state no later event can
undo: a running Job is then awaited, a failed one replaced. Reading the Job needs the cluster's
address and credentials, which the lab's kubeconfig (the host bootstrap's output) carries.
"""

from __future__ import annotations

import base64
import http.client
import json
import shutil
import ssl
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml

# pulumi-kubernetes provider/pkg/metadata/annotations.go AnnotationReplaceUnready.
REPLACE_UNREADY = {"pulumi.com/replaceUnready": "true"}
TIMEOUT_SECONDS = 10


def _entry(doc: dict[str, Any], key: str, name: str) -> dict[str, Any]:
    return next((e[key.rstrip("s")] for e in doc.get(key) or [] if e.get("name") == name), {})


def _request(kubeconfig: str, path: str) -> tuple[urllib.request.Request, ssl.SSLContext]:
    """A GET of `path` with the kubeconfig's current context."""
    doc = yaml.safe_load(kubeconfig) or {}
    context = _entry(doc, "contexts", doc.get("current-context", ""))
    cluster = _entry(doc, "clusters", context.get("cluster", ""))
    user = _entry(doc, "users", context.get("user", ""))
    if not cluster.get("server"):
        raise ValueError("the kubeconfig names no API server")
    ca = cluster.get("certificate-authority-data")
    tls = ssl.create_default_context(cadata=base64.b64decode(ca).decode() if ca else None)
    headers = {"Accept": "application/json"}
    if user.get("client-certificate-data") and user.get("client-key-data"):
        # The ssl module loads a key from files only: both live in a private folder that goes
        # once the context holds them, before any request, so that no kill of this process
        # while it waits on the API server leaves the cluster's admin key on disk.
        folder = Path(tempfile.mkdtemp(prefix="k8scifar-job-"))
        try:
            cert, key = folder / "client.crt", folder / "client.key"
            for path_, field in ((cert, "client-certificate-data"), (key, "client-key-data")):
                path_.touch(mode=0o600)
                path_.write_bytes(base64.b64decode(user[field]))
            tls.load_cert_chain(cert, key)
        finally:
            shutil.rmtree(folder)
    elif user.get("token"):
        headers["Authorization"] = f"Bearer {user['token']}"
    return urllib.request.Request(cluster["server"].rstrip("/") + path, headers=headers), tls


def read_object(kubeconfig: str, path: str) -> dict[str, Any] | None:
    """The object at the API path `path`, or None when there is none to read: no such object, no
    cluster yet, an unreachable or refusing API server, an answer that is no JSON object."""
    try:
        request, tls = _request(kubeconfig, path)
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS, context=tls) as reply:
            found = json.load(reply)
    # HTTPException: a server or proxy that drops the connection mid-reply (BadStatusLine,
    # IncompleteRead), which is no OSError.
    except (OSError, ValueError, urllib.error.URLError, http.client.HTTPException, yaml.YAMLError):
        return None
    return found if isinstance(found, dict) else None


def has_failed(kubeconfig: str, namespace: str, name: str) -> bool:
    """Whether the Job `namespace/name` exists with its Failed condition True. Anything else (no
    such Job, no cluster yet, an unreachable or refusing API server) is False: then nothing is
    replaced, and `up` awaits the Job as pulumi-kubernetes would."""
    job = read_object(kubeconfig, f"/apis/batch/v1/namespaces/{quote(namespace)}/jobs/{quote(name)}")
    if job is None:
        return False
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Failed" and c.get("status") == "True" for c in conditions)


def replace_if_failed(kubeconfig: str, namespace: str, name: str) -> dict[str, str]:
    """The annotations of a Job the lab awaits: replaced on the next `up` once failed, never while it runs."""
    return dict(REPLACE_UNREADY) if kubeconfig and has_failed(kubeconfig, namespace, name) else {}
