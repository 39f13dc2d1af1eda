#!/usr/bin/python3
"""The apt sources on this machine that name one repository, read as apt reads them.

sources.list(5): apt reads /etc/apt/sources.list and the files of sources.list.d whose names end
in `.list` (one-line style) or `.sources` (deb822 style) and are made of letters, digits, `_`,
`-`, `.` (and `:`, which apt 2.6 also takes), following symlinks; it ignores every other file there
(backups such as `*.list.save`, `x~.list`). In one-line style `#` starts a comment outside the
`[options]`; in deb822 style a line starting with `#` is a comment, stanzas are separated by blank
lines, field names are case-insensitive and a stanza whose `Enabled` is false (apt's
StringToBool: no, false, without, off, disable, or a number that is 0) is not read. Each entry
has its types (`deb`, `deb-src`), its URIs and its Signed-By (a keyring path, or the key inline).

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
from typing import Any

INLINE_KEY = "BEGIN PGP PUBLIC KEY BLOCK"
FILE_NAME = re.compile(r"[A-Za-z0-9_:-][A-Za-z0-9_.:-]*\.(list|sources)")
FALSE = {"no", "false", "without", "off", "disable"}
# A one-line entry: its type, its [options] (where `#` is no comment), then URI, suite, components.
ONE_LINE = re.compile(r"\s*([^\s#\[]+)\s+(?:\[([^\]]*)\])?(.*)")


def _one_line_entries(text: str) -> list[tuple[str, str, str]]:
    """(type, URI, Signed-By) of each entry of a one-line-style file."""
    entries = []
    for line in text.splitlines():
        entry = ONE_LINE.match(line)
        rest = entry.group(3).split("#", 1)[0].split() if entry else []
        if len(rest) < 2:  # no URI and suite: a comment, or nothing apt would read
            continue
        signed_by = re.search(r"signed-by=(\S+)", entry.group(2) or "")
        entries.append((entry.group(1), rest[0], signed_by.group(1) if signed_by else ""))
    return entries


def _enabled(value: str) -> bool:
    value = value.strip().lower()
    return not (value in FALSE or (value.isdigit() and int(value) == 0))


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
        if not _enabled(fields.get("enabled", "yes")):
            continue
        for kind in fields.get("types", "").split():
            entries += [(kind, uri, fields.get("signed-by", "")) for uri in fields.get("uris", "").split()]
    return entries


def _entries(path: Path) -> list[tuple[str, str, str]]:
    try:
        text = path.read_text(encoding="latin-1")  # any byte decodes; URIs are ASCII
    except OSError:  # what cannot be read here, apt cannot read either
        return []
    return _deb822_entries(text) if path.suffix == ".sources" else _one_line_entries(text)


def sources_of(match: str, sources_list: Path, sources_dir: Path, own: str, earlier: str) -> dict[str, Any]:
    """The answer above for the repository `match` names, from the files apt would read."""
    files = [sources_list] if sources_list.is_file() else []
    if sources_dir.is_dir():
        files += sorted(p for p in sources_dir.iterdir() if FILE_NAME.fullmatch(p.name) and p.is_file())
    found: dict[str, Any] = {"machine": [], "binary": False, "earlier": []}
    for path in files:
        named = [e for e in _entries(path) if match in e[1] and e[0] in ("deb", "deb-src")]
        if path.name == own or not named:
            continue
        if path.name == earlier and all(INLINE_KEY in e[2] for e in named):
            found["earlier"].append(str(path))
            continue
        found["machine"].append(str(path))
        found["binary"] = found["binary"] or any(e[0] == "deb" for e in named)
    return found


def main() -> None:
    # Imported here, not above: importing it patches sys.intern for the whole process, and the
    # tests call sources_of in a process that also runs torch (whose compiler refuses the patch).
    # Ansible finds a module's module_utils imports wherever they are in the file.
    from ansible.module_utils.basic import AnsibleModule

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
    params = module.params
    if not params["match"]:
        module.fail_json(msg="match must name the repository")
    found = sources_of(
        params["match"],
        Path(params["sources_list"]),
        Path(params["sources_dir"]),
        params["own"],
        params["earlier"],
    )
    module.exit_json(changed=False, **found)


if __name__ == "__main__":
    main()
