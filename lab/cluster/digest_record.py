"""Records the digest BuildKit pushed, as a ConfigMap the Pulumi program reads back.

Runs inside the build pod as `python -c <this file> NAMESPACE NAME METADATA_FILE PUSHED`, in the
trainer image's base (standard library only, pinned by digest), with the build's own
service-account token, which may create ConfigMaps in the build namespace and replace this one.

The digest is BuildKit's own result for the push. In moby/buildkit v0.23.2 the image exporter
(exporter/containerimage/export.go) pushes the manifest it committed and answers with
`image.name` (the `--output` name it pushed), `containerimage.digest` (that manifest's digest) and
`containerimage.descriptor` (its descriptor, base64 JSON); `buildctl --metadata-file`
(cmd/buildctl/build.go, writeMetadataFile) writes that answer as JSON, a base64 JSON object decoded
into an object. The three must agree, and the name must be the one this build pushed.

A ConfigMap already there (a retried pod, or a rebuild of the same tree after the registry lost
its images) is replaced: the digest just pushed is the one the registry now serves.
"""

from __future__ import annotations

import json
import re
import ssl
import sys
import urllib.error
import urllib.request
from pathlib import Path

ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
API = "https://kubernetes.default.svc"
DIGEST_KEY = "digest"
METADATA_KEY = "containerimage.digest"
NAME_KEY = "image.name"
DESCRIPTOR_KEY = "containerimage.descriptor"


def pushed_digest(metadata: dict[str, object], pushed: str) -> str:
    """The digest of the manifest BuildKit pushed as `pushed`; ValueError unless its metadata says so."""
    name = metadata.get(NAME_KEY)
    if name != pushed:
        raise ValueError(f"the build's metadata names {name!r} under {NAME_KEY!r}, not the pushed {pushed!r}")
    digest = metadata.get(METADATA_KEY)
    if not isinstance(digest, str) or not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise ValueError(f"the build's metadata has no image digest under {METADATA_KEY!r}: {digest!r}")
    descriptor = metadata.get(DESCRIPTOR_KEY)
    if not isinstance(descriptor, dict) or descriptor.get("digest") != digest:
        raise ValueError(f"the build's metadata has no descriptor of {digest} under {DESCRIPTOR_KEY!r}")
    return digest


def config_map(name: str, digest: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {DIGEST_KEY: digest}}


def _call(method: str, path: str, body: dict[str, object] | None = None) -> dict[str, object]:
    token = (ACCOUNT / "token").read_text().strip()
    request = urllib.request.Request(
        f"{API}{path}",
        data=json.dumps(body).encode() if body is not None else None,
        method=method,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    context = ssl.create_default_context(cafile=str(ACCOUNT / "ca.crt"))
    with urllib.request.urlopen(request, context=context, timeout=30) as response:
        return json.loads(response.read())


def main(argv: list[str]) -> int:
    namespace, name, metadata_file, pushed = argv
    digest = pushed_digest(json.loads(Path(metadata_file).read_text()), pushed)
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    try:
        _call("POST", path, config_map(name, digest))
    except urllib.error.HTTPError as err:
        if err.code != 409:  # anything but "already exists"
            raise
        _call("PUT", f"{path}/{name}", config_map(name, digest))
    print(f"recorded {digest} in {namespace}/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
