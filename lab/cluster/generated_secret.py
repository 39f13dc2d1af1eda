"""A secret the program makes for itself and keeps: Grafana's admin password.

`GeneratedSecret` is a dynamic resource (pure Python, no plugin, like lab.hosts' bootstrap). Its
provider draws the value in `create`, so it is never an input: not in the program, the stack file
or the engine's plan. It comes back as an output listed in `additional_secret_outputs`, which the
engine encrypts in the state with the stack's secrets provider; `pulumi stack output NAME` shows
`[secret]` unless asked with `--show-secrets`. Every later `pulumi up` keeps it (no input of it
changes); `pulumi up --replace URN` draws a new one.
"""

from __future__ import annotations

import secrets
from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, Resource, ResourceProvider

# 24 random bytes, URL-safe base64: 32 characters a shell, a URL and a YAML file take as they are.
SECRET_BYTES = 24
VALUE = "value"


def new_value() -> str:
    return secrets.token_urlsafe(SECRET_BYTES)


class GeneratedSecretProvider(ResourceProvider):
    """create: a fresh value; nothing else ever changes it."""

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(f"secret-{props['purpose']}", {**props, VALUE: new_value()})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        # The value is the point: a changed purpose text is no reason to lose it.
        return DiffResult(changes=False)


class GeneratedSecret(Resource, module="k8scifar", name="GeneratedSecret"):
    """A random value made once and kept as a secret output.

    Its type is pulumi-python:dynamic/k8scifar:GeneratedSecret.
    """

    value: pulumi.Output[str]

    def __init__(self, name: str, purpose: str, opts: pulumi.ResourceOptions | None = None) -> None:
        secret = pulumi.ResourceOptions(additional_secret_outputs=[VALUE])
        super().__init__(
            GeneratedSecretProvider(),
            name,
            {"purpose": purpose, VALUE: None},
            pulumi.ResourceOptions.merge(secret, opts),
        )


__all__ = ["VALUE", "GeneratedSecret", "GeneratedSecretProvider", "new_value"]
