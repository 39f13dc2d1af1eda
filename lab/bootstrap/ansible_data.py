"""Values handed to Ansible reach it as data, never as templates.

ansible-core 2.19 templates every string it trusts, and it trusts what the runner hands it: the
inventory file (`plugins/inventory/yaml.py` loads it `trusted_as_template=True`), a variables
file given as `-e @FILE` (`utils/vars.py` load_extra_vars) and, as measured with ansible-core
2.19.14 through ansible-runner 2.4.3, the extra variables the runner puts on the command line.
So a `{{ lookup('pipe', ...) }}` in a stack value would run on the operator's machine as soon as
Ansible reads the variable (a key path is read to connect, even to a node that refuses).

Every string the lab hands over is therefore marked unsafe in the JSON form Ansible reads back as
untrusted: `{"__ansible_unsafe": "..."}` (ansible-core `_internal/_json/_profiles/_legacy.py`,
`deserialize_unsafe`; the JSON spelling of `!unsafe`). An untrusted string is used as it is: a
template in the playbook that refers to it (`"{{ lab_nfs_export_path }}/runs"`, a play's `vars:`)
inserts its text and never evaluates it again. The lab's own templates live in the playbooks and
roles, never in the values, so nothing the lab hands over needs to be evaluated.

Mapping keys cannot be marked; the lab's are variable, group and host names, which the
configuration restricts to names (DNS labels, enum values), and `mark` refuses any other.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

UNSAFE = "__ansible_unsafe"
# What a key may be: a variable, group or host name, a skip step, a node name.
_KEY = re.compile(r"^[A-Za-z0-9_.-]+$")


def mark(value: Any) -> Any:
    """`value` with every string in it marked unsafe, for an inventory or variables Ansible reads."""
    if isinstance(value, str):
        return {UNSAFE: value}
    if isinstance(value, Mapping):
        for key in value:
            if not isinstance(key, str) or not _KEY.match(key):
                raise ValueError(f"{key!r} cannot be a key of Ansible data: it is not a plain name")
        return {key: mark(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [mark(item) for item in value]
    return value


__all__ = ["UNSAFE", "mark"]
