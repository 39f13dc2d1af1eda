"""What the pinned kubeadm accepts in its configuration file, restated from kubeadm's API types.

kubeadm decodes each YAML document by apiVersion and kind; a field its types do not have is only
a warning (cmd/kubeadm/app/util/config strict decoding), so a misspelt or moved field is
silently dropped. The fields below are those of cmd/kubeadm/app/apis/kubeadm/v1beta3/types.go and
v1beta4/types.go for the objects the lab writes (kubernetes.io/docs/reference/config-api/
kubeadm-config.v1beta3 and .v1beta4); the bootstrap token field is bootstraptoken/v1 BootstrapToken.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from typing import Any

import yaml

from tests.support.rules.k3s_rules import is_ip
from tests.support.rules.token_rules import kubeadm_token_problem

# kubeadm API versions by the first Kubernetes minor that accepts them: v1beta3 from 1.22,
# v1beta4 from 1.31 (kubeadm-config.v1beta4 "Changes from v1beta3"); v1beta3, deprecated in
# 1.31, is still read by the releases the lab pins.
KUBEADM_API_SINCE = {"v1beta3": 22, "v1beta4": 31}
COMPONENT_KINDS = {
    ("kubelet.config.k8s.io/v1beta1", "KubeletConfiguration"),
    ("kubeproxy.config.k8s.io/v1alpha1", "KubeProxyConfiguration"),
}

Check = Callable[[Any, str], list[str]]
Schema = dict[str, Any]


def _value(check: Callable[[Any], str | None]) -> Check:
    """A field check from a check of one value."""

    def field(value: Any, where: str) -> list[str]:
        found = check(value)
        return [f"{where}: {found}"] if found else []

    return field


@_value
def _string(value: Any) -> str | None:
    return None if isinstance(value, str) else f"{value!r} is not a string"


@_value
def _ip(value: Any) -> str | None:
    return None if is_ip(str(value)) else f"{value!r} is not an IP address"


@_value
def _cidr(value: Any) -> str | None:
    try:
        ipaddress.ip_network(str(value))
    except ValueError:
        return f"{value!r} is not a CIDR"
    return None


@_value
def _port(value: Any) -> str | None:
    return None if isinstance(value, int) and 0 < value < 65536 else f"{value!r} is not a port"


@_value
def _endpoint(value: Any) -> str | None:
    host, _, port = str(value).rpartition(":")
    return None if is_ip(host) and port.isdigit() else f"{value!r} is not <address>:<port>"


@_value
def _ca_hash(value: Any) -> str | None:
    # discovery: "sha256:<hex of the CA's public key info>", the only hash type kubeadm takes.
    return None if re.fullmatch(r"sha256:[0-9a-f]{64}", str(value)) else f"{value!r} is not sha256:<64 hex>"


@_value
def _duration(value: Any) -> str | None:
    return (
        None
        if re.fullmatch(r"(\d+(\.\d+)?(h|m|s|ms|us|ns))+", str(value))
        else f"{value!r} is not a Go duration"
    )


def _list(item: Any) -> Check:
    def field(value: Any, where: str) -> list[str]:
        if not isinstance(value, list):
            return [f"{where}: {value!r} is not a list"]
        return [p for i, v in enumerate(value) for p in _problems(v, item, f"{where}[{i}]")]

    return field


@_value
def _bootstrap_token(value: Any) -> str | None:
    return kubeadm_token_problem(str(value))


_BOOTSTRAP_TOKEN = {
    "token": _bootstrap_token, "description": _string, "ttl": _duration, "expires": _string,
    "usages": _list(_string), "groups": _list(_string),
}  # fmt: skip
_API_ENDPOINT = {"advertiseAddress": _ip, "bindPort": _port}
_TAINT = {"key": _string, "value": _string, "effect": _string, "timeAdded": _string}


def _node_registration(version: str) -> Schema:
    # v1beta4 turned kubeletExtraArgs from a map into a list of {name, value}.
    extra = _list({"name": _string, "value": _string}) if version == "v1beta4" else _string_map
    fields = {
        "name": _string, "criSocket": _string, "taints": _list(_TAINT), "kubeletExtraArgs": extra,
        "ignorePreflightErrors": _list(_string), "imagePullPolicy": _string,
    }  # fmt: skip
    return fields | ({"imagePullSerial": bool} if version == "v1beta4" else {})


def _string_map(value: Any, where: str) -> list[str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        return [f"{where}: {value!r} is not a map of strings"]
    return []


def _schemas(version: str) -> dict[str, Schema]:
    v4 = version == "v1beta4"
    extra_args = _list({"name": _string, "value": _string}) if v4 else _string_map
    component = {"extraArgs": extra_args, "extraVolumes": _list(dict)}
    api_server = (
        component
        | {"certSANs": _list(_string)}
        | ({"extraEnvs": _list(dict)} if v4 else {"timeoutForControlPlane": _duration})
    )
    run_only = {"dryRun": bool, "timeouts": dict} if v4 else {}
    return {
        "InitConfiguration": {
            "bootstrapTokens": _list(_BOOTSTRAP_TOKEN), "nodeRegistration": _node_registration(version),
            "localAPIEndpoint": _API_ENDPOINT, "certificateKey": _string, "skipPhases": _list(_string),
            "patches": dict, **run_only,
        },
        "ClusterConfiguration": {
            "etcd": dict, "networking": {"serviceSubnet": _cidr, "podSubnet": _cidr, "dnsDomain": _string},
            "kubernetesVersion": _string, "controlPlaneEndpoint": _endpoint, "apiServer": api_server,
            "controllerManager": component, "scheduler": component, "dns": dict, "certificatesDir": _string,
            "imageRepository": _string, "featureGates": dict, "clusterName": _string,
            **({"proxy": dict, "encryptionAlgorithm": _string, "certificateValidityPeriod": _duration,
                "caCertificateValidityPeriod": _duration} if v4 else {}),
        },
        "JoinConfiguration": {
            "nodeRegistration": _node_registration(version), "caCertPath": _string,
            "discovery": {
                "bootstrapToken": {
                    "token": _bootstrap_token, "apiServerEndpoint": _endpoint,
                    "caCertHashes": _list(_ca_hash), "unsafeSkipCAVerification": bool,
                },
                "file": dict, "tlsBootstrapToken": _string, **({} if v4 else {"timeout": _duration}),
            },
            "controlPlane": dict, "skipPhases": _list(_string), "patches": dict, **run_only,
        },
    }  # fmt: skip


def _problems(value: Any, schema: Any, where: str) -> list[str]:
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            return [f"{where}: {value!r} is not a mapping"]
        unknown = [f"{where}.{key}: no such field in kubeadm's types" for key in value if key not in schema]
        return unknown + [
            p
            for key, v in value.items()
            if key in schema
            for p in _problems(v, schema[key], f"{where}.{key}")
        ]
    if schema in (dict, bool):
        return [] if isinstance(value, schema) else [f"{where}: {value!r} is not a {schema.__name__}"]
    return schema(value, where)


def kubeadm_config_problems(text: str, kubernetes_version: str) -> list[str]:
    """Everything in a kubeadm configuration file that kubeadm `kubernetes_version` would misread."""
    minor = int(kubernetes_version.split(".")[1])
    problems = []
    for index, document in enumerate(yaml.safe_load_all(text)):
        where = f"document {index + 1}"
        api_version, kind = document.get("apiVersion", ""), document.get("kind", "")
        if (api_version, kind) in COMPONENT_KINDS:
            continue
        group, _, version = api_version.partition("/")
        if group != "kubeadm.k8s.io" or minor < KUBEADM_API_SINCE.get(version, 99):
            problems.append(f"{where}: kubeadm {kubernetes_version} does not read {api_version} {kind}")
            continue
        schema = _schemas(version).get(kind)
        if schema is None:
            problems.append(f"{where}: {api_version} has no kind {kind}")
            continue
        body = {k: v for k, v in document.items() if k not in {"apiVersion", "kind"}}
        problems += _problems(body, schema, f"{where} ({kind})")
        if kind == "ClusterConfiguration" and body.get("kubernetesVersion") != f"v{kubernetes_version}":
            problems.append(
                f"{where}: kubernetesVersion {body.get('kubernetesVersion')!r} is not v{kubernetes_version}"
            )
    return problems
