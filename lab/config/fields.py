"""Walking the configuration model's fields, for what describes it to a reader: the generated
reference (lab/config/reference.py) and the comments of a written stack file
(lab/cli/init/stackfile.py)."""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel


def nested_model(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds, directly, in a list or as an optional value."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = nested_model(arg)
        if found is not None:
            return found
    return None
