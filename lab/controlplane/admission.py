"""The API server's admission configuration: the file the lab's k3s role writes, rendered from the
role's own template and defaults, so the control plane enforces what a k3s lab enforces."""

from __future__ import annotations

import json
from pathlib import Path

import jinja2
import yaml

from lab.paths import ANSIBLE_DIR

ROLE = ANSIBLE_DIR / "roles" / "k3s"
TEMPLATE = ROLE / "templates" / "pod-security.yaml.j2"
EXEMPT_VARIABLE = "k3s_pod_security_exempt_namespaces"


def render(stack: str) -> str:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    # Ansible's `to_json` filter, which the template uses; the template names no other.
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["to_json"] = json.dumps
    template = env.from_string(TEMPLATE.read_text())
    return template.render(lab_stack=stack, **{EXEMPT_VARIABLE: defaults[EXEMPT_VARIABLE]})


def write(path: Path, stack: str) -> None:
    path.write_text(render(stack))
