#!/usr/bin/python3
"""The apt sources on this machine that name one repository, read as apt reads them.

sources.list(5): apt reads /etc/apt/sources.list and the files of sources.list.d whose names end
in `.list` (one-line style) or `.sources` (deb822 style), following symlinks, and ignores every
other file there (backups such as `*.list.save`). In one-line style `#` starts a comment; in
deb822 style a line starting with `#` is a comment, stanzas are separated by blank lines, field
names are case-insensitive and a stanza with `Enabled: no` is not read. Each entry has its types
(`deb`, `deb-src`), its URIs and its Signed-By (a keyring path, or the key itself inline).

Answers, for the repository `match` names (a URL without its scheme):
- machine: the files with an enabled entry for it, other than the lab's (`own`) and the lab's
  file of an earlier release (`earlier`, recognised by its inline key, which no install guide
  writes);
- binary: whether one of those entries is of type `deb` (a `deb-src` entry alone still makes apt
  refuse a second Signed-By, but installs nothing);
- earlier: the lab's file of an earlier release, when it is there.
"""

from __future__ import annotations

import re
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule

INLINE_KEY = "BEGIN PGP PUBLIC KEY BLOCK"


def _one_line_entries(text: str) -> list[tuple[str, str, str]]:
    """(type, URI, Signed-By) of each entry of a one-line-style file."""
    entries = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) < 3:
            continue
        kind, rest = words[0], " ".join(words[1:])
        options = re.match(r"\[([^\]]*)\]\s*", rest)
        signed_by = ""
        if options:
            found = re.search(r"signed-by=(\S+)", options.group(1))
            signed_by = found.group(1) if found else ""
            rest = rest[options.end() :]
        entries.append((kind, rest.split()[0], signed_by))
    return entries


def _deb822_entries(text: str) -> list[tuple[str, str, str]]:
    """(type, URI, Signed-By) of each entry of the enabled stanzas of a deb822-style file."""
    entries = []
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    for stanza in "\n".join(lines).split("\n\n"):
        fields: dict[str, str] = {}
        name = ""
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t") and name:
                fields[name] += "\n" + line.strip()
            elif ":" in line:
                name, value = line.split(":", 1)
                name = name.strip().lower()
                fields[name] = value.strip()
        if fields.get("enabled", "yes").lower() == "no":
            continue
        for kind in fields.get("types", "").split():
            entries += [(kind, uri, fields.get("signed-by", "")) for uri in fields.get("uris", "").split()]
    return entries


def _entries(path: Path) -> list[tuple[str, str, str]]:
    text = path.read_text(encoding="latin-1")  # any byte decodes; URIs are ASCII
    return _deb822_entries(text) if path.suffix == ".sources" else _one_line_entries(text)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "match": {"type": "str", "required": True},
            "sources_list": {"type": "path", "default": "/etc/apt/sources.list"},
            "sources_dir": {"type": "path", "default": "/etc/apt/sources.list.d"},
            "own": {"type": "str", "required": True},
            "earlier": {"type": "str", "required": True},
        },
        supports_check_mode=True,
    )
    match = module.params["match"]
    if not match:
        module.fail_json(msg="match must name the repository")
    sources_list, sources_dir = Path(module.params["sources_list"]), Path(module.params["sources_dir"])
    files = [sources_list] if sources_list.is_file() else []
    if sources_dir.is_dir():
        files += sorted(p for p in sources_dir.iterdir() if p.suffix in (".list", ".sources") and p.is_file())
    machine, binary, earlier = [], False, []
    for path in files:
        named = [e for e in _entries(path) if match in e[1] and e[0] in ("deb", "deb-src")]
        if path.name == module.params["own"] or not named:
            continue
        if path.name == module.params["earlier"] and all(INLINE_KEY in e[2] for e in named):
            earlier.append(str(path))
            continue
        machine.append(str(path))
        binary = binary or any(e[0] == "deb" for e in named)
    module.exit_json(changed=False, machine=machine, binary=binary, earlier=earlier)


if __name__ == "__main__":
    main()
