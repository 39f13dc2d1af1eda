"""`openpgp_fingerprints`: the v4 fingerprints of the primary keys in an ASCII-armored OpenPGP key block.

RFC 4880: armor (section 6.2) is base64 between BEGIN/END lines with an optional CRC line;
packets (section 4.2) have old- or new-format headers; a v4 fingerprint (section 12.2) is the
SHA-1 of 0x99, the public-key packet's two-byte length and its body. Only primary keys (tag 6)
count, not subkeys.
"""

from __future__ import annotations

import base64
import hashlib

PUBLIC_KEY_TAG = 6


def _dearmor(text: str) -> bytes:
    lines = text.strip().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("-----BEGIN PGP PUBLIC KEY BLOCK"))
    end = next(i for i, line in enumerate(lines) if line.startswith("-----END PGP PUBLIC KEY BLOCK"))
    body = lines[start + 1 : end]
    body = body[body.index("") + 1 :] if "" in body else body  # armor headers end at a blank line
    return base64.b64decode("".join(line for line in body if not line.startswith("=")))


def _packets(data: bytes) -> list[tuple[int, bytes]]:
    packets, at = [], 0
    while at < len(data):
        header = data[at]
        if not header & 0x80:
            raise ValueError("not an OpenPGP packet")
        if header & 0x40:  # new format
            tag, first, at = header & 0x3F, data[at + 1], at + 2
            if first < 192:
                length = first
            elif first < 224:
                length, at = ((first - 192) << 8) + data[at] + 192, at + 1
            elif first == 255:
                length, at = int.from_bytes(data[at : at + 4], "big"), at + 4
            else:
                raise ValueError("partial body lengths do not occur in key packets")
        else:  # old format
            tag, size = (header >> 2) & 0x0F, (1, 2, 4)[header & 0x03]
            length, at = int.from_bytes(data[at + 1 : at + 1 + size], "big"), at + 1 + size
        packets.append((tag, data[at : at + length]))
        at += length
    return packets


def openpgp_fingerprints(armored: str) -> list[str]:
    """Upper-case hex fingerprints, as `gpg --with-colons` prints them."""
    found = []
    for tag, body in _packets(_dearmor(armored)):
        if tag == PUBLIC_KEY_TAG and body[:1] == b"\x04":
            digest = hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body, usedforsecurity=False)
            found.append(digest.hexdigest().upper())
    return found


class FilterModule:
    def filters(self) -> dict[str, object]:
        return {"openpgp_fingerprints": openpgp_fingerprints}
