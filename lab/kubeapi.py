"""The kubeconfigs the lab reads on the operator's machine, and the official Kubernetes client built
from one: every reader of a kubeconfig goes through `load`, which refuses before anything runs.

A kubeconfig is hostile input. Whoever wrote it decides which programs run here, which files are
read, which cluster is asked and with which secret:

- "kubectl can run arbitrary executables, including shell scripts, with the full privileges of
  the invoking user, all without your knowledge", through `users[n].exec.command`
  (kubernetes.io/blog/2026/01/09/kubernetes-v1-35-kuberc-credential-plugin-allowlist/); an
  `auth-provider` runs its `cmd-path` (client-go plugin/pkg/client/auth). Neither runs here
  unless the operator allows it (`allowKubeconfigCommands` in the stack, docs/security.md).
- "File and path references in a kubeconfig file are relative to the location of the kubeconfig
  file" (kubernetes.io/docs/concepts/configuration/organize-cluster-access-kubeconfig/, "File
  references"; client-go tools/clientcmd/loader.go ResolveLocalPaths): each is resolved so, then
  read as `labctl results` reads a run's files (trainer.records.runfolders.read_named: a regular
  file, no pipe or device, at most MAX_FILE_BYTES) and inlined, so that nothing reads it later.
- kubectl takes the context from `--context`, else `current-context` (the same page, "Merging
  kubeconfig files"); a file that names several contexts is the operator's to choose from
  (`kubeconfigContext`), never the file's own `current-context`, which any `kubectl config
  use-context` changes.
- The secrets (keys, tokens, passwords) reach no message, log or repr: a refusal names the entry
  and field, never a value.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import shutil
import ssl
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3
import yaml
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from lab.bootstrap.kubeconfig import RUNS_CODE, fault_at
from trainer.records.runfolders import Unfit, read_named

# A kubeconfig and each certificate, key or token it names are a few KiB; this bounds what a
# kubeconfig can make the lab read into memory.
MAX_FILE_BYTES = 1024 * 1024
# The fields the lab reads (client-go tools/clientcmd/api/v1 Cluster and AuthInfo). Anything else
# changes whom the client talks to or as whom (`proxy-url`, `as`, `username`) and is refused
# rather than silently left out.
CLUSTER_FIELDS = frozenset(
    {"server", "certificate-authority", "certificate-authority-data", "insecure-skip-tls-verify",
     "tls-server-name", "extensions"}
)  # fmt: skip
USER_FIELDS = frozenset(
    {"client-certificate", "client-certificate-data", "client-key", "client-key-data", "token",
     "tokenFile", "extensions", *RUNS_CODE}
)  # fmt: skip
# File references and the inline field each becomes.
FILE_FIELDS = {
    "certificate-authority": "certificate-authority-data",
    "client-certificate": "client-certificate-data",
    "client-key": "client-key-data",
}
ALLOW_COMMANDS = "k8scifar:allowKubeconfigCommands"
CHOOSE_CONTEXT = "k8scifar:kubeconfigContext"


class KubeconfigRefused(ValueError):
    """A kubeconfig the lab will not use; the message is one line: what is wrong and how to fix it."""


@dataclass(frozen=True)
class Kubeconfig:
    """One context of a kubeconfig, self-contained: its cluster and user, every file inlined."""

    context: str
    origin: str  # where it came from, as messages name it
    document: dict[str, Any] = field(repr=False)
    runs_commands: bool = False

    @property
    def cluster(self) -> dict[str, Any]:
        return dict(self.document["clusters"][0]["cluster"])

    @property
    def user(self) -> dict[str, Any]:
        return dict(self.document["users"][0]["user"])

    def text(self) -> str:
        """The kubeconfig as YAML, for the Kubernetes provider: one context, no file references."""
        return yaml.safe_dump(self.document, sort_keys=False)


def read(path: Path, *, context: str | None = None, allow_commands: bool = False) -> Kubeconfig:
    """The kubeconfig at `path` (read as its file references are), checked by `load`."""
    return load(_read_file(path.expanduser(), "the kubeconfig").decode(), path, context, allow_commands)


def load(
    text: str, origin: Path | None = None, context: str | None = None, allow_commands: bool = False
) -> Kubeconfig:
    """The context `context` of the kubeconfig `text` (read from `origin`, against which its file
    references resolve; with no origin, a file reference is refused), or KubeconfigRefused."""
    where = str(origin) if origin is not None else "the cluster's kubeconfig"
    doc = _document(text, where)
    name = _context_name(doc, where, context)
    entry = _named(doc, "contexts", "context", name, where)
    cluster = _named(doc, "clusters", "cluster", str(entry.get("cluster", "")), where)
    user = _named(doc, "users", "user", str(entry.get("user", "")), where) if entry.get("user") else {}
    base = origin.expanduser().resolve().parent if origin is not None else None
    cluster = _inline(_only(cluster, CLUSTER_FIELDS, f"{where}: cluster of context {name!r}"), base, where)
    user = _inline(_only(user, USER_FIELDS, f"{where}: user of context {name!r}"), base, where)
    if not isinstance(cluster.get("server"), str) or not cluster["server"].startswith("https://"):
        raise KubeconfigRefused(
            f"{where}: context {name!r} names no https:// API server (its cluster's `server`);"
            " the lab sends its credentials over TLS only"
        )
    runs = [k for k in RUNS_CODE if k in user]
    if runs and not allow_commands:
        raise KubeconfigRefused(
            f"{where}: the user of context {name!r} has {' and '.join(runs)}, which runs a command on"
            f" this machine; if you trust it, set `{ALLOW_COMMANDS}: true` in the stack file"
            " (docs/security.md), or use a kubeconfig with a client certificate or token"
        )
    if runs and base is not None and "exec" in user:
        user["exec"] = _exec_resolved(user["exec"], base)
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }
    return Kubeconfig(name, where, document, runs_commands=bool(runs))


def api_client(kubeconfig: Kubeconfig) -> k8s_client.ApiClient:
    """The official client for `kubeconfig`, its client key held in memory only."""
    configuration = k8s_client.Configuration()
    if kubeconfig.runs_commands:
        # Allowed by the operator: the official loader runs the exec plugin or auth provider.
        k8s_config.load_kube_config_from_dict(kubeconfig.document, client_configuration=configuration)
        return k8s_client.ApiClient(configuration)
    cluster, user = kubeconfig.cluster, kubeconfig.user
    configuration.host = cluster["server"]
    if user.get("token"):
        configuration.api_key["authorization"] = f"Bearer {user['token']}"
    api = k8s_client.ApiClient(configuration)
    # The official loader writes a client key to a temporary file that stays until the process
    # exits (kubernetes config/kube_config.py _create_temp_file_with_content), so a kill leaves
    # the cluster's admin key on disk; urllib3 takes an SSL context instead, built in memory.
    api.rest_client.pool_manager = urllib3.PoolManager(
        ssl_context=_tls(cluster, user),
        server_hostname=cluster.get("tls-server-name"),
        retries=False,
    )
    return api


def _tls(cluster: dict[str, Any], user: dict[str, Any]) -> ssl.SSLContext:
    ca = cluster.get("certificate-authority-data")
    tls = ssl.create_default_context(cadata=_decoded(ca).decode() if ca else None)
    if cluster.get("insecure-skip-tls-verify") is True:
        tls.check_hostname = False
        tls.verify_mode = ssl.CERT_NONE
    if user.get("client-certificate-data") and user.get("client-key-data"):
        with _private_folder() as folder:
            cert, key = folder / "client.crt", folder / "client.key"
            for path, data in ((cert, user["client-certificate-data"]), (key, user["client-key-data"])):
                path.touch(mode=0o600)
                path.write_bytes(_decoded(data))
            tls.load_cert_chain(cert, key)
    return tls


@contextlib.contextmanager
def _private_folder() -> Iterator[Path]:
    """A folder only this user reads, gone when the block ends: the ssl module loads a key from
    files only, and the key must be off the disk before any request, which a kill may interrupt."""
    folder = Path(tempfile.mkdtemp(prefix="k8scifar-key-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def _decoded(data: str) -> bytes:
    return base64.b64decode(data, validate=True)


def _document(text: str, where: str) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise KubeconfigRefused(f"{where} is not YAML{fault_at(err)}; name a kubeconfig file") from None
    if not isinstance(doc, dict) or doc.get("kind", "Config") != "Config":
        raise KubeconfigRefused(f"{where} is not a kubeconfig (`kind: Config`); name a kubeconfig file")
    return doc


def _names(doc: dict[str, Any], key: str) -> list[str]:
    entries = doc.get(key) or []
    if not isinstance(entries, list):
        raise KubeconfigRefused(f"the kubeconfig's {key} is not a list; fix the file")
    return [str(e.get("name")) for e in entries if isinstance(e, dict)]


def _context_name(doc: dict[str, Any], where: str, chosen: str | None) -> str:
    contexts = _names(doc, "contexts")
    if chosen is not None:
        if chosen not in contexts:
            raise KubeconfigRefused(
                f"{where} has no context {chosen!r} ({CHOOSE_CONTEXT});"
                f" it has: {', '.join(contexts) or 'no context at all'}"
            )
        return chosen
    if len(contexts) == 1:
        return contexts[0]
    if not contexts:
        raise KubeconfigRefused(f"{where} names no context; name a kubeconfig with one")
    raise KubeconfigRefused(
        f"{where} names several contexts ({', '.join(contexts)}); choose the lab's with"
        f" `{CHOOSE_CONTEXT}: NAME` in the stack file"
    )


def _named(doc: dict[str, Any], key: str, inner: str, name: str, where: str) -> dict[str, Any]:
    found = [e for e in doc.get(key) or [] if isinstance(e, dict) and str(e.get("name")) == name]
    if len(found) != 1 or not isinstance(found[0].get(inner), dict):
        count = "no" if not found else f"{len(found)}"
        raise KubeconfigRefused(f"{where} has {count} usable {inner} {name!r} in its {key}; fix the file")
    return dict(found[0][inner])


def _only(entry: dict[str, Any], allowed: frozenset[str], what: str) -> dict[str, Any]:
    extra = sorted(str(k) for k in entry if k not in allowed)
    if extra:
        raise KubeconfigRefused(
            f"{what} has {', '.join(extra)}, which the lab does not take; remove it, or use a"
            f" kubeconfig with only {', '.join(sorted(allowed - {'extensions'}))}"
        )
    return entry


def _inline(entry: dict[str, Any], base: Path | None, where: str) -> dict[str, Any]:
    """`entry` with each file reference read and inlined (the inline field wins, as in client-go),
    and each inline field checked to be base64."""
    found = dict(entry)
    for reference, inline in FILE_FIELDS.items():
        path = found.pop(reference, None)
        if path is not None and inline not in found:
            found[inline] = base64.b64encode(_referenced(path, base, reference, where)).decode()
        if inline in found:
            try:
                _decoded(found[inline])
            except (binascii.Error, TypeError, ValueError):
                raise KubeconfigRefused(f"{where}: {inline} is not base64; fix the file") from None
    token_file = found.pop("tokenFile", None)
    if token_file is not None and not found.get("token"):
        found["token"] = _referenced(token_file, base, "tokenFile", where).decode().strip()
    return found


def _referenced(value: object, base: Path | None, field_name: str, where: str) -> bytes:
    if not isinstance(value, str) or not value:
        raise KubeconfigRefused(f"{where}: {field_name} is not a path; fix the file")
    if base is None:
        raise KubeconfigRefused(
            f"{where}: {field_name} names a file, which a kubeconfig that is no file cannot;"
            f" inline it as {FILE_FIELDS.get(field_name, 'token')}"
        )
    return _read_file(base / Path(value).expanduser(), f"its {field_name}")


def _read_file(path: Path, what: str) -> bytes:
    try:
        return read_named(str(path), MAX_FILE_BYTES)
    except FileNotFoundError:
        raise KubeconfigRefused(f"{path} ({what}) does not exist; fix the path") from None
    except Unfit as err:
        raise KubeconfigRefused(f"{err} ({what}); point the kubeconfig at a regular file") from None
    except OSError as err:
        raise KubeconfigRefused(f"{path} ({what}) cannot be read ({err.strerror}); fix the path") from None


def _exec_resolved(spec: Any, base: Path) -> Any:
    """An exec plugin's command resolves against the kubeconfig's folder when it holds a path
    separator: client-go tools/clientcmd/loader.go GetAuthInfoFileReferences, "Only resolve exec
    command if it isn't PATH based" (`strings.ContainsRune(authInfo.Exec.Command,
    filepath.Separator)`); a bare name is looked up on PATH when it runs."""
    if isinstance(spec, dict) and isinstance(spec.get("command"), str) and "/" in spec["command"]:
        return {**spec, "command": str(base / spec["command"])}
    return spec
