"""`labctl render`: the cluster objects the Pulumi program declares, as manifests for `kubectl apply -f`.

The program runs under the engine's mocks (lab/cluster/program_run.py), so no Pulumi CLI, plugin or
cluster is needed, and every object is written exactly as the program declares it. The
kubeconfig and the join secrets belong to the provider and the host bootstrap, which are not
Kubernetes objects, so they are never written. A Secret that only a Helm release reads (Grafana's
admin password) stays with that release, which is not rendered either; any other Secret stops it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from lab.cli.common.console import CliError, console, plural
from lab.cli.common.stackarg import add_stack_option, flags, load
from lab.cli.hosts import kubeconfig_file
from lab.config import read_stack_values, stack_file
from lab.files import ensure_folder, write_file

if TYPE_CHECKING:
    from lab.cluster.program_run import ProgramRun

# `kubectl apply -f DIR` takes the files in name order: what others refer to comes first.
ORDER = (
    "Namespace",
    "RuntimeClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "ConfigMap",
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "Service",
    "NetworkPolicy",
    "Node",
    "DaemonSet",
    "Deployment",
    "Job",
    "StatefulSet",
)
# What the lab goes without when a release is not installed.
WITHOUT = {
    "kueue": "the ranks then start without gang admission",
    "prometheus": "no metrics are collected",
    "grafana": "no dashboards",
    "node-exporter": "no network figures",
    "dcgm-exporter": "no GPU figures",
}
WITHOUT_DEFAULT = "the lab runs without it"
# Objects that only patch what exists: pulumi-kubernetes' server-side apply patches
# (`NodePatch`) become the partial object `kubectl apply` merges into the live one.
PATCH_SUFFIX = "Patch"


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "render",
        help="write the cluster objects as YAML for `kubectl apply -f` (no Pulumi CLI needed)",
        description="Run the Pulumi program for the stack without the Pulumi engine and write every"
        " Kubernetes object it declares to DIR, one file each, named in the order `kubectl apply -f DIR`"
        " should create them. No secret is written: the kubeconfig stays with `labctl hosts up`.",
    )
    add_stack_option(parser)
    parser.add_argument("dir", type=Path, metavar="DIR", help="folder for the manifests (new or empty)")
    parser.set_defaults(handler=run)


def release_secrets(program: ProgramRun) -> dict[str, str]:
    """The Secrets a Helm release waits for, each with that release's name: they exist for the
    release alone, and go where it goes."""
    releases = program.helm_releases()
    return {
        secret.urn: next(r.name for r in releases if secret.urn in r.dependencies)
        for secret in program.of_kind("Secret")
        if any(secret.urn in r.dependencies for r in releases)
    }


def manifests(program: ProgramRun) -> list[dict[str, Any]]:
    """Every Kubernetes object of the run as the API takes it, in the order to apply them; no
    Secret (those a Helm release reads are left out with it, any other is refused)."""
    from lab.cluster.program_run import holds_secret, kubernetes_object

    objects = []
    with_releases = release_secrets(program)
    for resource in program.kubernetes_objects():
        if resource.kind == "Secret" and resource.urn in with_releases:
            continue
        if resource.kind == "Secret" or holds_secret(resource.inputs):
            raise CliError(
                f"the program declares {resource.kind} {resource.name} with a secret;"
                " secrets are never rendered"
            )
        obj = kubernetes_object(resource)
        obj["kind"] = obj["kind"].removesuffix(PATCH_SUFFIX)
        obj["metadata"] = {"name": resource.name, **obj["metadata"]}
        objects.append(obj)
    return sorted(objects, key=lambda o: ORDER.index(o["kind"]) if o["kind"] in ORDER else len(ORDER))


def by_tag(text: str, program: ProgramRun) -> str:
    """`text` with the trainer image named by its tag instead of a digest: `pulumi up` reads the
    digest the build Job records, but without the engine no build has run, so none exists yet."""
    for digest, config_map in program.stand_in_digests.items():
        tag = config_map.rsplit("-", 1)[-1]
        text = text.replace(f"@{digest}", f":{tag}")
    return text


def write(objects: list[dict[str, Any]], folder: Path, program: ProgramRun) -> list[Path]:
    """One file per object, numbered in apply order, e.g. `00-namespace-k8scifar.yaml`."""
    ensure_folder(folder, 0o755)
    written = []
    for index, obj in enumerate(objects):
        path = folder / f"{index:02d}-{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"
        write_file(path, by_tag(yaml.safe_dump(obj, sort_keys=False), program), 0o644)
        written.append(path)
    return written


def run(args: argparse.Namespace) -> int:
    cfg = load(args)
    if not cfg.installs_kubernetes:
        raise CliError(
            f"stack {args.stack} skips the Kubernetes install, so it declares no cluster objects;"
            f" render a stack that installs Kubernetes"
        )
    if args.dir.exists() and (not args.dir.is_dir() or any(args.dir.iterdir())):
        raise CliError(f"{args.dir} is not an empty folder; name a new or empty one")
    values = read_stack_values(stack_file(args.stack, args.stacks_dir))
    with console.status(f"running the program for stack {args.stack} (no engine, nothing deployed)"):
        # Imported here: the program pulls in pulumi_kubernetes, which no other command needs.
        from lab.cluster.program_run import run_program

        program = run_program(args.stack, values)
        objects = manifests(program)
    written = write(objects, args.dir, program)
    kept = release_secrets(program)
    for release in program.helm_releases():
        # A chart and its custom resources need Helm and the engine; the pods run without them.
        secrets = sorted(program.by_urn(urn).name for urn, name in kept.items() if name == release.name)
        console.print(
            f"not rendered: the Helm release {release.name} ({release.inputs['chart']}"
            f" {release.inputs['version']}) and its objects"
            + "".join(f", with the Secret {secret} it reads" for secret in secrets)
            + f"; {WITHOUT.get(release.name, WITHOUT_DEFAULT)} (`pulumi up` installs it)"
        )
    console.print(
        f"wrote {plural(len(written), 'object')} to {args.dir}; after `labctl hosts up {flags(args)}`:"
    )
    console.print(f"  KUBECONFIG={kubeconfig_file(args.stack)} kubectl apply -f {args.dir}")
    return 0
