"""The build's digest recorder (lab/cluster/digest_record.py), with the API answered in-process."""

from __future__ import annotations

import json
import urllib.error
from pathlib import Path
from typing import Any

import pytest

from lab.cluster import digest_record

DIGEST = "sha256:" + "ab" * 32


def test_the_digest_comes_from_buildkits_metadata_and_nothing_else_passes() -> None:
    assert digest_record.pushed_digest({"containerimage.digest": DIGEST, "image.name": "x"}) == DIGEST
    for bad in ({}, {"containerimage.digest": "sha256:short"}, {"containerimage.digest": "latest"}):
        with pytest.raises(ValueError, match="no image digest"):
            digest_record.pushed_digest(bad)


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
    metadata.write_text(json.dumps({"containerimage.digest": DIGEST}))
    calls = _recorder(monkeypatch, existing)
    assert digest_record.main(["lab-build", "trainer-image-abc", str(metadata)]) == 0
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "trainer-image-abc"},
        "data": {"digest": DIGEST},
    }
    path = "/api/v1/namespaces/lab-build/configmaps"
    expected = [("POST", path, body)] + ([("PUT", f"{path}/trainer-image-abc", body)] if existing else [])
    assert calls == expected
