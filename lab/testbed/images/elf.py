"""What an ELF program needs loaded: its interpreter (PT_INTERP) and libraries (DT_NEEDED).

Read from the file itself, so the closure of a program in a Debian tree is found without running
anything from it (no chroot, no root). Only 64-bit little-endian files: the images are amd64.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

PT_LOAD, PT_DYNAMIC, PT_INTERP = 1, 2, 3
DT_NULL, DT_NEEDED, DT_STRTAB = 0, 1, 5


class NotElf(ValueError):
    """The file is not a 64-bit little-endian ELF file."""


@dataclass(frozen=True)
class Needs:
    interpreter: str | None  # e.g. /lib64/ld-linux-x86-64.so.2; None for a static program
    libraries: tuple[str, ...]  # DT_NEEDED sonames, in file order


def is_elf(path: Path) -> bool:
    with path.open("rb") as handle:
        return handle.read(4) == b"\x7fELF"


def needs(path: Path) -> Needs:
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise NotElf(f"{path}: not a 64-bit little-endian ELF file")
    phoff, phentsize, phnum = struct.unpack_from("<Q", data, 0x20)[0], *struct.unpack_from("<HH", data, 0x36)
    loads: list[tuple[int, int, int]] = []  # (vaddr, offset, filesz)
    dynamic: tuple[int, int] | None = None
    interpreter = None
    for index in range(phnum):
        p_type, _flags, offset, vaddr, _paddr, filesz = struct.unpack_from(
            "<IIQQQQ", data, phoff + index * phentsize
        )
        if p_type == PT_LOAD:
            loads.append((vaddr, offset, filesz))
        elif p_type == PT_DYNAMIC:
            dynamic = (offset, filesz)
        elif p_type == PT_INTERP:
            interpreter = data[offset : offset + filesz].split(b"\0", 1)[0].decode()
    if dynamic is None:
        return Needs(interpreter, ())
    needed: list[int] = []
    strtab = None
    offset, size = dynamic
    for at in range(offset, offset + size, 16):
        tag, value = struct.unpack_from("<qQ", data, at)
        if tag == DT_NULL:
            break
        if tag == DT_NEEDED:
            needed.append(value)
        elif tag == DT_STRTAB:
            strtab = value
    if strtab is None:
        raise NotElf(f"{path}: a dynamic section without DT_STRTAB")
    base = _file_offset(loads, strtab, path)
    names = tuple(data[base + at : data.index(b"\0", base + at)].decode() for at in needed)
    return Needs(interpreter, names)


def _file_offset(loads: list[tuple[int, int, int]], vaddr: int, path: Path) -> int:
    for start, offset, size in loads:
        if start <= vaddr < start + size:
            return vaddr - start + offset
    raise NotElf(f"{path}: address {vaddr:#x} is in no loaded segment")
