#!/usr/bin/python3
"""Deletes the network links the cluster's CNI made, known by the addresses they carry.

The names alone do not tell: `cni0` is also the CNI bridge plugin's default bridge name, which
any other CNI user (a podman network) gets when its configuration names none. The cluster's
links carry addresses of the cluster's own networks: flannel's bridge holds the gateway of the
node's pod subnet (the bridge plugin's isGateway), flannel.1 and flannel-wg the subnet's own
address (flannel-io/flannel pkg/backend/vxlan/device.go, Configure), kube-proxy's kube-ipvs0 the
Services' addresses. A link of one of those names with no address in those networks is another
tool's and stays.
"""

from __future__ import annotations

import ipaddress
import json

from ansible.module_utils.basic import AnsibleModule


def clusters(links: list[dict], names: list[str], networks: list[str]) -> list[str]:
    """The links (as `ip -json address show` lists them) that are the cluster's."""
    nets = [ipaddress.ip_network(n, strict=False) for n in networks]
    found = []
    for link in links:
        if link.get("ifname") not in names:
            continue
        addresses = [ipaddress.ip_address(a["local"]) for a in link.get("addr_info", []) if "local" in a]
        if any(a in n for a in addresses for n in nets if a.version == n.version):
            found.append(link["ifname"])
    return found


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "names": {"type": "list", "elements": "str", "required": True},
            "networks": {"type": "list", "elements": "str", "required": True},
        },
        supports_check_mode=False,
    )
    ip = module.get_bin_path("ip", required=True)
    _rc, out, _err = module.run_command([ip, "-json", "address", "show"], check_rc=True)
    deleted = clusters(json.loads(out or "[]"), module.params["names"], module.params["networks"])
    for name in deleted:
        module.run_command([ip, "link", "delete", name], check_rc=True)
    module.exit_json(changed=bool(deleted), deleted=deleted)


if __name__ == "__main__":
    main()
