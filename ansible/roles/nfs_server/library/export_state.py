#!/usr/bin/python3
"""Whether the export directory is the lab's own to take, looked at without following a link.

The lab creates the export, marks it as its own with `mark` and keeps its data in `folders` (owned
by the trainer's uid). It takes nothing else: a directory that exists without the mark belongs to
someone (an owner's `datasets/` and `runs/` look like the lab's), and a link anywhere on the way,
or a directory on the way that every user may write (where anyone could put a link in the
export's place), would lead the lab's ownership changes and `nfs.purgeOnDestroy` elsewhere.

Answers:
- exists: whether the export directory is there;
- ours: whether it holds the lab's mark (a regular file), so the lab made it;
- folders: the lab's folders that are there as real directories;
- problems: why the lab must not touch it, each with its fix; empty when it may.
"""

from __future__ import annotations

import os
import stat
from pathlib import PurePosixPath

from ansible.module_utils.basic import AnsibleModule


def _way(path: PurePosixPath) -> list[str]:
    """Why the directories on the way to `path` (`/` excluded) could lead the lab elsewhere."""
    problems = []
    for parent in reversed(path.parents[:-1]):
        try:
            found = os.lstat(parent)
        except FileNotFoundError:
            break  # the lab creates the rest of the way, as root
        mode = found.st_mode
        if stat.S_ISLNK(mode):
            problems.append(f"{parent} is a symbolic link, which would lead the lab's changes elsewhere")
        elif not stat.S_ISDIR(mode):
            problems.append(f"{parent} is not a directory")
        elif mode & stat.S_IWOTH:
            problems.append(
                f"{parent} is writable by every user, who could put a link in the export's place;"
                " use a path under directories only root may write, such as /srv"
            )
        elif found.st_uid != 0 or mode & stat.S_IWGRP:
            # The kernel follows a link anywhere on the way (path_resolution(7)), so whoever may
            # rename an entry of `parent` could swap the rest of the way for one between the
            # check and the changes.
            who = f"user {found.st_uid}" if found.st_uid != 0 else f"group {found.st_gid}"
            problems.append(
                f"{parent} is writable by {who}, who could put a link in the export's place;"
                " use a path under directories only root may write, such as /srv"
            )
    return problems


def inspect(path: PurePosixPath, mark: str, folders: list[str]) -> dict[str, object]:
    problems = _way(path)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return {"exists": False, "ours": False, "folders": [], "problems": problems}
    if stat.S_ISLNK(mode) or not stat.S_ISDIR(mode):
        what = "a symbolic link" if stat.S_ISLNK(mode) else "not a directory"
        problems.append(f"{path} is {what}; use a path of real directories")
        return {"exists": True, "ours": False, "folders": [], "problems": problems}
    marked = path / mark
    ours = os.path.lexists(marked) and stat.S_ISREG(os.lstat(marked).st_mode)
    if not ours:
        problems.append(
            f"{path} already exists and the lab did not make it (it has no {mark}): the lab takes"
            " only a directory it creates, so choose a path that does not exist yet (if an earlier"
            f" version of the lab made this one, mark it with `touch {marked}`)"
        )
        return {"exists": True, "ours": False, "folders": [], "problems": problems}
    present = []
    for folder in folders:
        inside = path / folder
        if not os.path.lexists(inside):
            continue
        kind = os.lstat(inside).st_mode
        if stat.S_ISDIR(kind):
            present.append(folder)
        else:
            what = "a symbolic link" if stat.S_ISLNK(kind) else "not a directory"
            problems.append(f"{inside} is {what}, not the lab's folder; remove it")
    foreign = sorted(set(os.listdir(path)) - set(folders) - {mark})
    if foreign:
        problems.append(f"{path} holds {', '.join(foreign)}, which the lab did not put there; move them out")
    return {"exists": True, "ours": True, "folders": present, "problems": problems}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "str", "required": True},
            "mark": {"type": "str", "required": True},
            "folders": {"type": "list", "elements": "str", "required": True},
        },
        supports_check_mode=True,
    )
    path = PurePosixPath(module.params["path"])
    if not path.is_absolute() or ".." in path.parts:
        module.fail_json(msg=f"{path} is not an absolute path")
    module.exit_json(changed=False, **inspect(path, module.params["mark"], module.params["folders"]))


if __name__ == "__main__":
    main()
