"""What k3s accepts in /etc/rancher/k3s/config.yaml and registries.yaml, restated from k3s.

config.yaml: k3s turns every key into the command-line flag of the same name (k3s
pkg/configfilearg/parser.go readConfigFile: `--<key> <value>`, one flag per list item), so a key
must be a flag of `k3s server` or `k3s agent`, with a value of the flag's kind. The flags are
those of the pinned release line, from k3s pkg/cli/cmds/server.go and agent.go as documented in
k3s-io/docs docs/cli/server.md and docs/cli/agent.md ("K3s Server/Agent CLI Help").

registries.yaml: the schema of k3s's registry configuration (k3s-io/docs
docs/installation/private-registry.md; rancher/wharfie pkg/registries, which k3s uses to read it).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any
from urllib.parse import urlsplit

import yaml

from tests.support.rules.token_rules import (
    k3s_agent_join_problem,
    k3s_agent_token_problem,
    k3s_server_token_problem,
)

# Flag kinds: "str" (StringFlag, IntFlag, DurationFlag: one scalar), "list" (StringSliceFlag: a
# list or one scalar), "bool" (BoolFlag).


def _flags(kind: str, names: str) -> dict[str, str]:
    return dict.fromkeys(names.split(), kind)


_AGENT_FLAGS = {
    **_flags(
        "str",
        """
        config vmodule log token token-file server data-dir node-name
        image-credential-provider-bin-dir image-credential-provider-config lb-server-port
        container-runtime-endpoint default-runtime image-service-endpoint pause-image
        snapshotter private-registry bind-address resolv-conf flannel-iface flannel-conf
        flannel-cni-conf vpn-auth vpn-auth-file v
        """,
    ),
    **_flags(
        "list",
        """
        node-label node-taint node-ip node-external-ip node-internal-dns node-external-dns
        kubelet-arg kube-proxy-arg
        """,
    ),
    **_flags(
        "bool",
        """
        debug alsologtostderr with-node-id selinux protect-kernel-defaults
        disable-default-registry-endpoint nonroot-devices enable-pprof rootless
        prefer-bundled-bin docker disable-apiserver-lb
        """,
    ),
}
_SERVER_ONLY_FLAGS = {
    **_flags(
        "str",
        """
        https-listen-port advertise-address advertise-port service-node-port-range
        cluster-domain flannel-backend egress-selector-mode servicelb-namespace
        write-kubeconfig write-kubeconfig-mode write-kubeconfig-group helm-job-image
        agent-token agent-token-file cluster-reset-restore-path datastore-endpoint
        datastore-cafile datastore-certfile datastore-keyfile etcd-snapshot-name
        etcd-snapshot-schedule-cron etcd-snapshot-retention etcd-snapshot-dir
        etcd-s3-endpoint etcd-s3-endpoint-ca etcd-s3-access-key etcd-s3-secret-key
        etcd-s3-bucket etcd-s3-region etcd-s3-folder etcd-s3-proxy etcd-s3-config-secret
        etcd-s3-timeout default-local-storage-path secrets-encryption-provider
        system-default-registry
        """,
    ),
    **_flags(
        "list",
        """
        tls-san cluster-cidr service-cidr cluster-dns kube-apiserver-arg etcd-arg
        kube-controller-manager-arg kube-scheduler-arg kube-cloud-controller-manager-arg
        disable
        """,
    ),
    **_flags(
        "bool",
        """
        tls-san-security flannel-ipv6-masq flannel-external-ip cluster-init cluster-reset
        etcd-expose-metrics etcd-disable-snapshots etcd-snapshot-compress etcd-s3
        etcd-s3-skip-ssl-verify etcd-s3-insecure disable-scheduler disable-cloud-controller
        disable-kube-proxy disable-network-policy disable-helm-controller embedded-registry
        supervisor-metrics secrets-encryption
        """,
    ),
}
# `k3s server` also runs an agent and takes every agent flag except the agent-only
# disable-apiserver-lb.
K3S_FLAGS = {
    "server": {
        **{k: v for k, v in _AGENT_FLAGS.items() if k != "disable-apiserver-lb"},
        **_SERVER_ONLY_FLAGS,
    },
    "agent": _AGENT_FLAGS,
}
# `--disable` items (docs/cli/server.md: "valid items: ...").
K3S_DISABLE_ITEMS = {"coredns", "servicelb", "traefik", "local-storage", "metrics-server", "runtimes"}
# Kubernetes node names are DNS subdomains (RFC 1123), at most 253 characters.
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# Linux network interface names: at most 15 bytes, no '/', ':' or whitespace (net/core/dev.c dev_valid_name).
_INTERFACE = re.compile(r"^[^/:\s]{1,15}$")


def _kind_problem(key: str, kind: str, value: Any) -> str | None:
    scalar = isinstance(value, str | int | float) and not isinstance(value, bool)
    if kind == "bool" and not isinstance(value, bool):
        return f"{key}: a boolean flag, given {value!r}"
    if kind == "str" and not scalar:
        return f"{key}: takes one value, given {value!r}"
    if kind == "list" and not (
        scalar or (isinstance(value, list) and all(isinstance(v, str) for v in value))
    ):
        return f"{key}: takes a list of strings, given {value!r}"
    return None


def is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def _value_problems(config: dict[str, Any], role: str, secrets: dict[str, str]) -> list[str]:
    """The values k3s would refuse or misread, for the flags the lab sets."""
    problems = []
    if role == "server":
        problems.append(k3s_server_token_problem(str(config.get("token", ""))))
        problems.append(k3s_agent_token_problem(str(config.get("agent-token", ""))))
    else:
        problems.append(
            k3s_agent_join_problem(str(config.get("token", "")), secrets["ca_hash"], secrets["agent"])
        )
        url = urlsplit(str(config.get("server", "")))
        if url.scheme != "https" or not url.hostname or not url.port:
            # pkg/clientaccess/token.go setServer: "only https:// URLs are supported".
            problems.append(f"server: {config.get('server')!r} is not https://<address>:<port>")
    name = str(config.get("node-name", ""))
    if not _DNS_SUBDOMAIN.match(name) or len(name) > 253:
        problems.append(f"node-name: {name!r} is not a DNS subdomain")
    ips = config.get("node-ip", [])
    problems += [
        f"node-ip: {ip!r} is not an IP address"
        for ip in ([ips] if isinstance(ips, str) else ips)
        if not is_ip(ip)
    ]
    if "flannel-iface" in config and not _INTERFACE.match(str(config["flannel-iface"])):
        problems.append(f"flannel-iface: {config['flannel-iface']!r} is not an interface name")
    mode = str(config.get("write-kubeconfig-mode", "0600"))
    # pkg/cli/server: the mode is parsed with strconv.ParseInt(mode, 8, 0).
    if not re.fullmatch(r"0?[0-7]{3}", mode):
        problems.append(f"write-kubeconfig-mode: {mode!r} is not an octal mode")
    disabled = config.get("disable", [])
    unknown = set([disabled] if isinstance(disabled, str) else disabled) - K3S_DISABLE_ITEMS
    problems += [f"disable: {item!r} is no packaged component" for item in sorted(unknown)]
    return [p for p in problems if p]


def k3s_config_problems(text: str, role: str, secrets: dict[str, str]) -> list[str]:
    """Everything in a config.yaml that `k3s <role>` would not take as meant.

    `secrets`: the agent secret ("agent") and the server CA hash ("ca_hash") an agent's token must carry.
    """
    config = yaml.safe_load(text)
    if not isinstance(config, dict):
        return ["config.yaml is not a mapping of flags"]
    flags = K3S_FLAGS[role]
    problems = [f"{key}: no `k3s {role}` flag of that name" for key in config if key not in flags]
    problems += [
        p for key, value in config.items() if key in flags and (p := _kind_problem(key, flags[key], value))
    ]
    return problems + _value_problems(config, role, secrets)


_MIRROR_FIELDS = {"endpoint", "rewrite"}
_CONFIG_FIELDS = {
    "auth": {"username", "password", "auth", "identitytoken", "token"},
    "tls": {"cert_file", "key_file", "ca_file", "insecure_skip_verify"},
}


def _endpoint_problems(registry: str, endpoints: Any, plain_http: bool) -> list[str]:
    if not isinstance(endpoints, list) or not endpoints:
        return [f"mirrors.{registry}.endpoint: a list of URLs"]
    problems = []
    for endpoint in endpoints:
        url = urlsplit(str(endpoint))
        if url.scheme not in {"http", "https"} or not url.netloc:
            problems.append(f"mirrors.{registry}.endpoint: {endpoint!r} is not an http(s) URL")
        elif plain_http and url.scheme != "http":
            # private-registry.md: without TLS the endpoint must say http://, else https is used.
            problems.append(f"mirrors.{registry}.endpoint: {endpoint!r} would be reached over https")
        if f"{url.scheme}://{url.netloc}{url.path.rstrip('/')}" == f"https://{registry}/v2":
            # private-registry.md: an endpoint equal to the default endpoint is ignored.
            problems.append(
                f"mirrors.{registry}.endpoint: {endpoint!r} is the default endpoint, which k3s ignores"
            )
    return problems


def registries_problems(text: str, plain_http_registries: set[str]) -> list[str]:
    """Everything in a registries.yaml that k3s would not read as meant."""
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        return ["registries.yaml is not a mapping"]
    problems = [
        f"{key}: not a registries.yaml section (mirrors, configs)"
        for key in data
        if key not in {"mirrors", "configs"}
    ]
    for registry, mirror in (data.get("mirrors") or {}).items():
        if not isinstance(mirror, dict):
            problems.append(f"mirrors.{registry}: a mapping with endpoint and rewrite")
            continue
        problems += [
            f"mirrors.{registry}.{key}: no such mirror field" for key in mirror if key not in _MIRROR_FIELDS
        ]
        problems += _endpoint_problems(registry, mirror.get("endpoint"), registry in plain_http_registries)
    for host, config in (data.get("configs") or {}).items():
        for section, fields in (config or {}).items():
            if section not in _CONFIG_FIELDS:
                problems.append(f"configs.{host}.{section}: no such section (auth, tls)")
            else:
                problems += [
                    f"configs.{host}.{section}.{f}: no such field"
                    for f in fields or {}
                    if f not in _CONFIG_FIELDS[section]
                ]
    return problems
