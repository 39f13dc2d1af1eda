"""Render stack values as a commented stack file; the comments are the configuration model's own
descriptions, so a written file explains itself the way docs/configuration.md does."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from lab.config import PROJECT, LabConfig
from lab.config.fields import nested_model

HEADER = """\
# Written by `labctl init`; every key is described in docs/configuration.md.
# Check the machines with `labctl doctor --stack NAME`, then `pulumi up --stack NAME`.
"""


def _fields(model: type[BaseModel]) -> dict[str, Any]:
    return {field.alias or name: field for name, field in model.model_fields.items()}


def _describe(model: type[BaseModel] | None, key: str) -> str:
    field = _fields(model).get(key) if model else None
    if field is None:
        return ""
    inner = nested_model(field.annotation)
    return field.description or ((inner.__doc__ or "").strip().splitlines() or [""])[0]


def _scalar(value: Any) -> str:
    return json.dumps(value)


def _mapping_lines(
    model: type[BaseModel] | None, values: dict[str, Any], indent: str, first: str
) -> list[str]:
    lines = []
    for i, (key, value) in enumerate(values.items()):
        note = _describe(model, key)
        prefix = first if i == 0 else indent
        lines.append(f"{prefix}{key}: {_scalar(value)}" + (f"  # {note}" if note else ""))
    return lines


def render_stack(values: dict[str, Any]) -> str:
    """The stack file for `k8scifar:*` values (prefix not written), one comment per key."""
    lines = [HEADER.rstrip("\n"), "config:"]
    fields = _fields(LabConfig)
    for key, value in values.items():
        lines.append(f"  # {_describe(LabConfig, key)}")
        inner = nested_model(fields[key].annotation)
        if isinstance(value, dict):
            lines.append(f"  {PROJECT}:{key}:")
            lines += _mapping_lines(inner, value, "    ", "    ")
        elif isinstance(value, list):
            lines.append(f"  {PROJECT}:{key}:")
            for item in value:
                lines += _mapping_lines(inner, item, "      ", "    - ")
        else:
            lines.append(f"  {PROJECT}:{key}: {_scalar(value)}")
    return "\n".join(lines) + "\n"
