"""Pulumi's dynamic provider host, started and driven over gRPC the way the engine drives it.

On `pulumi up` the engine runs the SDK's plugin script `pulumi-resource-pulumi-python`, which is
`python -u -m pulumi.dynamic` (pulumi/pulumi, sdk/python/dist/pulumi-resource-pulumi-python); the
host prints the port of its gRPC server on stdout, and the engine then calls Configure, Check,
Diff, Create, Update and Delete on it (pulumi/dynamic/__main__.py in the SDK). Every request
carries `__provider`, the provider pickled by the SDK's `serialize_provider`; the host answers
`acceptSecrets=False`, so values arrive plain.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import struct_pb2
from pulumi.dynamic import ResourceProvider
from pulumi.dynamic.dynamic import serialize_provider
from pulumi.runtime import rpc
from pulumi.runtime.proto import provider_pb2
from pulumi.runtime.proto.provider_pb2_grpc import ResourceProviderStub

from tests.support.tiers import costly

URN = "urn:pulumi:demo::k8scifar::pulumi-python:dynamic/k8scifar:HostBootstrap::hosts"
PROVIDER_KEY = "__provider"
# `__provider` as states written before the bootstrap moved from lab/hosts.py to
# lab/bootstrap/resource.py hold it: serialize_provider(HostBootstrapProvider()) of that release.
PROVIDER_BEFORE_THE_MOVE = (
    "gASVOQAAAAAAAACMCWxhYi5ob3N0c5SMFUhvc3RCb290c3RyYXBQcm92aWRlcpSTlCmBlH2UjAd2ZXJib3NllIlzYi4="
)
# How long one call may take: a playbook run on this machine takes a few seconds.
CALL_TIMEOUT_S = 120


def _struct(props: Mapping[str, Any]) -> struct_pb2.Struct:
    return asyncio.run(rpc.serialize_properties(dict(props), {}))


def _plain(struct: struct_pb2.Struct) -> dict[str, Any]:
    return rpc.deserialize_properties(struct)


@dataclass
class ProviderHost:
    """A running `python -m pulumi.dynamic` and a client speaking the engine's side of it."""

    process: subprocess.Popen[bytes]
    stub: ResourceProviderStub
    provider: str

    def configure(self) -> provider_pb2.ConfigureResponse:
        return self.stub.Configure(
            provider_pb2.ConfigureRequest(args=_struct({}), acceptSecrets=True), timeout=CALL_TIMEOUT_S
        )

    def _with_provider(self, props: Mapping[str, Any]) -> dict[str, Any]:
        return {**props, PROVIDER_KEY: self.provider}

    def check(self, news: Mapping[str, Any]) -> dict[str, Any]:
        request = provider_pb2.CheckRequest(
            urn=URN, olds=_struct({}), news=_struct(self._with_provider(news))
        )
        response = self.stub.Check(request, timeout=CALL_TIMEOUT_S)
        assert not response.failures, response.failures
        return _plain(response.inputs)

    def create(self, inputs: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        request = provider_pb2.CreateRequest(urn=URN, properties=_struct(inputs))
        response = self.stub.Create(request, timeout=CALL_TIMEOUT_S)
        return response.id, _plain(response.properties)

    def diff(self, id_: str, olds: Mapping[str, Any], news: Mapping[str, Any]) -> int:
        request = provider_pb2.DiffRequest(id=id_, urn=URN, olds=_struct(olds), news=_struct(news))
        return self.stub.Diff(request, timeout=CALL_TIMEOUT_S).changes

    def update(self, id_: str, olds: Mapping[str, Any], news: Mapping[str, Any]) -> dict[str, Any]:
        request = provider_pb2.UpdateRequest(id=id_, urn=URN, olds=_struct(olds), news=_struct(news))
        return _plain(self.stub.Update(request, timeout=CALL_TIMEOUT_S).properties)

    def delete(self, id_: str, outputs: Mapping[str, Any]) -> None:
        request = provider_pb2.DeleteRequest(id=id_, urn=URN, properties=_struct(outputs))
        self.stub.Delete(request, timeout=CALL_TIMEOUT_S)


@costly("the engine's dynamic provider host, started for real")
@contextmanager
def provider_host(
    provider: ResourceProvider, cwd: Path, pythonpath: Path, env: Mapping[str, str] | None = None
) -> Iterator[ProviderHost]:
    """Start the host in `cwd` importing the lab from `pythonpath`; stop it when done.

    `env` adds to the host's environment (the engine passes the operator's environment on).
    """
    environment = {**os.environ, **(env or {}), "PYTHONPATH": str(pythonpath)}
    process = subprocess.Popen(
        [sys.executable, "-u", "-m", "pulumi.dynamic"],
        cwd=cwd,
        env=environment,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=30)
            yield ProviderHost(process, ResourceProviderStub(channel), serialize_provider(provider))
    finally:
        process.kill()
        process.wait()
