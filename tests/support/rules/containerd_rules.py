"""What containerd reads from certs.d/<registry>/hosts.toml and config.toml, restated from containerd.

hosts.toml: containerd remotes/docker/config/hosts.go (core/remotes/docker/config/hosts.go in
2.x) decodes the file into hostFileConfig (capabilities, ca, client, skip_verify, header,
override_path) plus `server` and the `host` table; any other key is ignored without a word, and
a file it cannot decode is only logged ("failed to decode hosts.toml") before containerd falls
back to the certificate files of the directory, so a mistake shows only as pulls over https.

config.toml: where the CRI plugin reads the settings the lab changes (containerd
docs/cri/config.md for 1.x, version 2; docs/cri/config.md for 2.x, version 3).
"""

from __future__ import annotations

import tomllib
from typing import Any
from urllib.parse import urlsplit

# The fields of hostFileConfig that every containerd from 1.6 on reads (dial_timeout came later).
_HOST_FIELDS = {"capabilities", "ca", "client", "skip_verify", "header", "override_path"}
_CAPABILITIES = {"pull", "resolve", "push"}


def _host_problems(where: str, config: dict[str, Any]) -> list[str]:
    problems = [
        f"{where}.{key}: containerd does not read this field" for key in config if key not in _HOST_FIELDS
    ]
    # parseHostConfig: any other capability is "unknown capability".
    unknown = set(config.get("capabilities", [])) - _CAPABILITIES
    problems += [f"{where}.capabilities: unknown capability {c!r}" for c in sorted(unknown)]
    return problems


def _url_problem(where: str, server: str) -> str | None:
    # parseHostConfig prefixes a bare host with https://; the lab's registry speaks plain http.
    url = urlsplit(server if server.startswith("http") else f"https://{server}")
    return (
        None if url.scheme == "http" and url.netloc else f"{where}: {server!r} is not reached over plain http"
    )


def hosts_toml_problems(text: str) -> list[str]:
    """Everything in a hosts.toml for the lab's plain-HTTP registry that containerd would not use as meant."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        return [f"not TOML: {error}"]
    problems = _host_problems("(top level)", {k: v for k, v in data.items() if k not in {"server", "host"}})
    if "server" in data and (problem := _url_problem("server", str(data["server"]))):
        problems.append(problem)
    hosts = data.get("host")
    if not isinstance(hosts, dict) or not hosts:
        # getSortedHosts (containerd 1.6/1.7): a file without a `host` table is "invalid `host` tree".
        problems.append('no [host."..."] table: containerd 1.6/1.7 refuse the file')
        return problems
    for name, config in hosts.items():
        if problem := _url_problem(f"host.{name}", name):
            problems.append(problem)
        problems += _host_problems(f"host.{name}", config)
    return problems


def _at(data: dict[str, Any], *path: str) -> Any:
    for key in path:
        data = data.get(key, {}) if isinstance(data, dict) else {}
    return data


def cri_settings(text: str) -> dict[str, Any]:
    """The CRI settings the lab sets, read from where containerd reads them in either layout."""
    data = tomllib.loads(text)
    if data.get("version") == 3:
        runtime = _at(data, "plugins", "io.containerd.cri.v1.runtime")
        images = _at(data, "plugins", "io.containerd.cri.v1.images")
        return {
            "sandbox image": _at(images, "pinned_images", "sandbox"),
            "cni plugin dirs": _at(runtime, "cni", "bin_dirs"),
            "registry hosts": _at(images, "registry", "config_path"),
            "systemd cgroups": _at(runtime, "containerd", "runtimes", "runc", "options", "SystemdCgroup"),
            "restrict oom score adj": runtime.get("restrict_oom_score_adj"),
        }
    cri = _at(data, "plugins", "io.containerd.grpc.v1.cri")
    return {
        "sandbox image": cri.get("sandbox_image"),
        "cni plugin dirs": [_at(cri, "cni", "bin_dir")],
        "registry hosts": _at(cri, "registry", "config_path"),
        "systemd cgroups": _at(cri, "containerd", "runtimes", "runc", "options", "SystemdCgroup"),
        "restrict oom score adj": cri.get("restrict_oom_score_adj"),
    }
