"""The build's digest recorder (lab/cluster/digest_record.py), with the API answered in-process."""

from __future__ import annotations

import base64
import json
import urllib.error
from pathlib import Path
from typing import Any

import pytest

from lab.cluster import digest_record

DIGEST = "sha256:" + "ab" * 32
PUSHED = "registry.k8scifar.svc.cluster.local:5000/k8scifar/trainer:abc"


def exporter_response(digest: str = DIGEST, name: str = PUSHED) -> dict[str, str]:
    """What BuildKit v0.23.2's image exporter answers after a push (exporter/containerimage/
    export.go): every value a string, the descriptor base64-encoded JSON."""
    descriptor = {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest, "size": 1234}
    return {
        "image.name": name,
        "containerimage.digest": digest,
        "containerimage.config.digest": "sha256:" + "cd" * 32,
        "containerimage.descriptor": base64.b64encode(json.dumps(descriptor).encode()).decode(),
    }


def metadata_file(response: dict[str, str]) -> dict[str, Any]:
    """The file `buildctl --metadata-file` writes from that answer (cmd/buildctl/build.go,
    writeMetadataFile): a value that decodes from base64 to a non-empty JSON object is written as
    that object, any other as the string it was."""
    out: dict[str, Any] = {}
    for key, value in response.items():
        try:
            decoded = json.loads(base64.b64decode(value, validate=True))
        except ValueError:
            decoded = None
        out[key] = decoded if isinstance(decoded, dict) and decoded else value
    return out


def test_the_digest_is_buildkits_answer_for_the_push_and_nothing_else_passes() -> None:
    assert digest_record.pushed_digest(metadata_file(exporter_response()), PUSHED) == DIGEST
    other = "sha256:" + "ef" * 32
    bad = {
        "no digest": {
            k: v for k, v in metadata_file(exporter_response()).items() if k != "containerimage.digest"
        },
        "a short digest": metadata_file(exporter_response(digest="sha256:short")),
        "a tag for a digest": metadata_file(exporter_response(digest="latest")),
        "another image's name": metadata_file(exporter_response(name=PUSHED.replace(":abc", ":buildcache"))),
        "a descriptor of another manifest": {
            **metadata_file(exporter_response()),
            "containerimage.descriptor": metadata_file(exporter_response(digest=other))[
                "containerimage.descriptor"
            ],
        },
        "the descriptor left encoded": exporter_response(),
    }
    for case, metadata in bad.items():
        with pytest.raises(ValueError, match="the build's metadata"):
            digest_record.pushed_digest(metadata, PUSHED)
            pytest.fail(case)


def _recorder(monkeypatch: pytest.MonkeyPatch, existing: bool) -> list[tuple[str, str, Any]]:
    calls: list[tuple[str, str, Any]] = []

    def call(method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        calls.append((method, path, body))
        if method == "POST" and existing:
            raise urllib.error.HTTPError(path, 409, "AlreadyExists", None, None)  # type: ignore[arg-type]
        return {}

    monkeypatch.setattr(digest_record, "_call", call)
    return calls


@pytest.mark.parametrize("existing", [False, True])
def test_the_recorded_map_holds_the_digest_just_pushed(
    existing: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    metadata = tmp_path / "metadata.json"
    metadata.write_text(json.dumps(metadata_file(exporter_response())))
    calls = _recorder(monkeypatch, existing)
    assert digest_record.main(["lab-build", "trainer-image-abc", str(metadata), PUSHED]) == 0
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "trainer-image-abc"},
        "data": {"digest": DIGEST},
    }
    path = "/api/v1/namespaces/lab-build/configmaps"
    expected = [("POST", path, body)] + ([("PUT", f"{path}/trainer-image-abc", body)] if existing else [])
    assert calls == expected
