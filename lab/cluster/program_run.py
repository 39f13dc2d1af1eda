"""Runs the Pulumi program under the engine's mocks and records what it declares.

The Pulumi engine is not needed to know what the program declares: `pulumi.runtime.set_mocks`
stands in for it, every resource registration is recorded with its inputs, parent, provider and
dependencies, and every stack export is resolved. `labctl render` writes the Kubernetes objects
recorded this way as manifests; the program's tests inspect them. No host is touched: the host
bootstrap, a dynamic resource, answers with placeholders instead of running Ansible.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import runpy
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc

from lab.config import PROJECT, read_stack_values, stack_file
from lab.paths import ROOT

MAIN = ROOT / "__main__.py"
DYNAMIC_RESOURCE = "pulumi-python:dynamic/k8scifar:HostBootstrap"
GENERATED_SECRET = "pulumi-python:dynamic/k8scifar:GeneratedSecret"
CONFIG_VARIABLE = "PULUMI_CONFIG"
SECRET_KEYS_VARIABLE = "PULUMI_CONFIG_SECRET_KEYS"
# What the host bootstrap answers under the mocks in place of site.yml's secrets: recognisable
# placeholders, so a test can tell that none of them leaked into an object or a manifest.
FAKE_TOKEN = "abcdef.0123456789abcdef"
HELM_TYPE_PREFIX = "kubernetes:helm.sh/"
# API groups of custom resources the program declares; kubernetes-validate knows none of them.
CUSTOM_GROUPS = ("kueue.x-k8s.io",)
FAKE_KUBECONFIG = "apiVersion: v1\nkind: Config\nclusters: []\n# fake-kubeconfig-secret\n"
# What a generated secret (lab.cluster.generated_secret) answers under the mocks, as recognisable.
FAKE_GENERATED_SECRET = "fake-generated-secret-0123456789"


@dataclass
class Registered:
    """One resource as the engine saw it."""

    type: str
    name: str
    urn: str
    inputs: dict[str, Any]
    parent: str
    provider: str
    dependencies: list[str]
    secret_outputs: list[str]
    replace_on_changes: list[str] = field(default_factory=list)
    delete_before_replace: bool = False
    create_timeout: str = ""
    update_timeout: str = ""
    ignore_changes: list[str] = field(default_factory=list)

    @property
    def is_kubernetes(self) -> bool:
        """A built-in Kubernetes object, which the official schema validates."""
        return self.is_kubernetes_resource and not self.is_helm_release and not self.is_custom

    @property
    def is_kubernetes_resource(self) -> bool:
        return self.type.startswith("kubernetes:") and "providers" not in self.type

    @property
    def is_helm_release(self) -> bool:
        return self.type.startswith(HELM_TYPE_PREFIX)

    @property
    def is_custom(self) -> bool:
        """An object of a custom resource, which its own project's CRD describes (checked by hand)."""
        return self.type.startswith(tuple(f"kubernetes:{group}/" for group in CUSTOM_GROUPS))

    @property
    def kind(self) -> str:
        return self.type.rsplit(":", 1)[-1]


@dataclass
class ProgramRun:
    stack: str
    resources: list[Registered] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    secret_outputs: set[str] = field(default_factory=set)
    # What each component passed to register_outputs, by the component's URN.
    component_outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Stand-in image digests the program read back from the build's ConfigMaps, each with the
    # ConfigMap's id (`namespace/trainer-image-<tag>`): no build ran, so no real digest exists.
    stand_in_digests: dict[str, str] = field(default_factory=dict)

    def kubernetes_objects(self) -> list[Registered]:
        return [r for r in self.resources if r.is_kubernetes]

    def of_kind(self, kind: str) -> list[Registered]:
        return [r for r in self.kubernetes_objects() if r.kind == kind]

    def custom_objects(self) -> list[Registered]:
        return [r for r in self.resources if r.is_custom]

    def helm_releases(self) -> list[Registered]:
        return [r for r in self.resources if r.is_helm_release]

    def one(self, kind: str) -> Registered:
        found = self.of_kind(kind)
        assert len(found) == 1, f"{self.stack}: expected one {kind}, found {[r.name for r in found]}"
        return found[0]

    def by_urn(self, urn: str) -> Registered:
        return next(r for r in self.resources if r.urn == urn)


class RecordingMonitor(pulumi_mocks.MockMonitor):
    """The engine's mock monitor, keeping each registration's options as well as its inputs."""

    def __init__(self, mocks: pulumi.runtime.Mocks, run: ProgramRun) -> None:
        super().__init__(mocks)
        self.run = run

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            self.run.resources.append(
                Registered(
                    type=request.type,
                    name=request.name,
                    urn=response.urn,
                    inputs=rpc.deserialize_properties(request.object),
                    parent=request.parent,
                    provider=request.provider,
                    dependencies=list(request.dependencies),
                    secret_outputs=list(request.additionalSecretOutputs),
                    replace_on_changes=list(request.replaceOnChanges),
                    delete_before_replace=request.deleteBeforeReplace,
                    create_timeout=request.customTimeouts.create,
                    update_timeout=request.customTimeouts.update,
                    ignore_changes=list(request.ignoreChanges),
                )
            )
        return response

    def RegisterResourceOutputs(self, request: Any) -> Any:
        self.run.component_outputs[request.urn] = rpc.deserialize_properties(request.outputs)
        return super().RegisterResourceOutputs(request)


def fake_digest(config_map_id: str) -> str:
    """What the image build records (lab/cluster/digest_record.py) in `namespace/trainer-image-<tag>`:
    a stand-in that differs with the tag, as a real digest does."""
    return "sha256:" + hashlib.sha256(config_map_id.encode()).hexdigest()


class LabMocks(pulumi.runtime.Mocks):
    """Echo inputs back as outputs, the way a provider with nothing to compute would."""

    def __init__(self, run: ProgramRun, kubeconfig: str = FAKE_KUBECONFIG) -> None:
        self.run = run
        self.kubeconfig = kubeconfig

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict]:
        state = dict(args.inputs)
        if args.typ.startswith("kubernetes:") and isinstance(state.get("metadata"), dict):
            state["metadata"] = {"name": args.name, **state["metadata"]}
        if args.typ == DYNAMIC_RESOURCE:  # the host bootstrap: what site.yml would have returned
            state.update(kubeconfig=self.kubeconfig, token=FAKE_TOKEN, nodes={})
        if args.typ == GENERATED_SECRET:  # what the provider's create would have drawn
            state.update(value=FAKE_GENERATED_SECRET)
        if args.resource_id and args.typ == "kubernetes:core/v1:ConfigMap":  # the build's recorded digest
            digest = fake_digest(args.resource_id)
            self.run.stand_in_digests[digest] = args.resource_id
            state.update(data={"digest": digest})
        return args.resource_id or f"{args.name}-id", state

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None


def _config_value(value: Any) -> str:
    """A stack-file value as the language host hands it over: text as is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


@contextmanager
def _language_host_config(config: dict[str, str], secret_keys: list[str]) -> Iterator[None]:
    """The configuration as `pulumi up` hands it to the program, then loaded the way the SDK does.

    The language host puts every key's value (a string) in PULUMI_CONFIG and the secret keys in
    PULUMI_CONFIG_SECRET_KEYS (pulumi/pulumi: sdk/python/cmd/pulumi-language-python/main.go);
    the SDK's launcher reads both into the runtime before running the program
    (sdk/python/cmd/pulumi-language-python-exec).
    """
    saved = {name: os.environ.get(name) for name in (CONFIG_VARIABLE, SECRET_KEYS_VARIABLE)}
    os.environ[CONFIG_VARIABLE] = json.dumps(config)
    os.environ[SECRET_KEYS_VARIABLE] = json.dumps(secret_keys)
    try:
        pulumi.runtime.set_all_config(
            pulumi.runtime.get_config_env(), pulumi.runtime.get_config_secret_keys_env()
        )
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _current_event_loop() -> None:
    """The engine's mocks make their futures on the thread's current event loop (pulumi's
    runtime/resource.py: `asyncio.Future()`), and `asyncio.run` ends by unsetting it: after any
    `asyncio.run` in this process, the thread has none until one is set."""
    policy = asyncio.get_event_loop_policy()
    try:
        policy.get_event_loop()
    except RuntimeError:
        policy.set_event_loop(policy.new_event_loop())


def run_program(
    stack: str,
    values: dict[str, Any] | None = None,
    main: Path = MAIN,
    *,
    other_config: dict[str, str] | None = None,
    secret_keys: list[str] | None = None,
    kubeconfig: str = FAKE_KUBECONFIG,
) -> ProgramRun:
    """Run `main` as stack `stack` (its stack file, or `values` when given) and record it.

    `other_config` adds keys of other namespaces (full names, string values); `secret_keys` lists
    the keys the engine decrypted from `secure:` values; `kubeconfig` is what the host bootstrap
    answers (by default one that names no cluster).
    """
    if values is None:
        values = read_stack_values(stack_file(stack))
    _current_event_loop()
    run = ProgramRun(stack)
    mocks = LabMocks(run, kubeconfig)
    pulumi.runtime.set_mocks(
        mocks, project=PROJECT, stack=stack, preview=False, monitor=RecordingMonitor(mocks, run)
    )
    config = {f"{PROJECT}:{k}": _config_value(v) for k, v in values.items()} | (other_config or {})
    exports: dict[str, Any] = {}
    real_export = pulumi.export

    def record_export(name: str, value: Any) -> None:
        exports[name] = value
        real_export(name, value)

    @pulumi.runtime.test
    def program() -> pulumi.Output:
        pulumi.export = record_export
        try:
            runpy.run_path(str(main), run_name="__main__")
        finally:
            pulumi.export = real_export
        resolved = {k: pulumi.Output.from_input(v) for k, v in exports.items()}
        secrets = {k: pulumi.Output.from_input(v).is_secret() for k, v in exports.items()}

        async def settle() -> None:
            for name, out in resolved.items():
                run.outputs[name] = await out.future()
                if await secrets[name]:
                    run.secret_outputs.add(name)

        return pulumi.Output.from_input(settle())

    with _language_host_config(config, secret_keys or []):
        program()
    return run


def is_secret(value: Any) -> bool:
    """Whether `value` is a secret as the engine receives one (a value wrapped with the secret
    signature, pulumi/runtime/rpc.py `wrap_rpc_secret`)."""
    return isinstance(value, dict) and value.get(rpc._special_sig_key) == rpc._special_secret_sig


def holds_secret(value: Any) -> bool:
    """Whether a secret is anywhere inside `value`."""
    if is_secret(value):
        return True
    if isinstance(value, dict):
        return any(holds_secret(v) for v in value.values())
    if isinstance(value, list):
        return any(holds_secret(v) for v in value)
    return False


def unwrap_secrets(value: Any) -> Any:
    """`value` with every secret replaced by what it holds, as the provider sends it to the cluster."""
    if is_secret(value):
        return unwrap_secrets(value["value"])
    if isinstance(value, dict):
        return {k: unwrap_secrets(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap_secrets(v) for v in value]
    return value


def kubernetes_object(resource: Registered) -> dict[str, Any]:
    """The manifest a resource stands for, as the Kubernetes API would receive it (secrets in the
    clear: whoever writes it out must refuse those that hold one, as `labctl render` does)."""
    obj = unwrap_secrets(dict(resource.inputs))
    obj.setdefault("metadata", {})
    return obj
