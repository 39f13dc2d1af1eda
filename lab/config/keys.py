"""How a stack file's keys map onto the configuration's models: camelCase keys, no unknown ones,
and the string types several keys share."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, StringConstraints
from pydantic.alias_generators import to_camel

from lab.config.facts import DNS_LABEL, DNS_LABEL_MAX, INTERFACE_NAME

DnsLabel = Annotated[str, StringConstraints(pattern=DNS_LABEL, max_length=DNS_LABEL_MAX)]
InterfaceName = Annotated[str, StringConstraints(pattern=INTERFACE_NAME)]


class KeyModel(BaseModel):
    # camelCase keys in the stack file, snake_case in Python; unknown keys are errors so typos surface.
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)
