"""Whether a Job that `pulumi up` awaits has failed for good, read from the cluster as the program runs.

pulumi-kubernetes decides a Job's fate in two places (provider/pkg/provider/provider.go Diff;
provider/pkg/await/job.go; the await's checker is provider/pkg/await/checker/job/check.go):

- a Job that failed, or whose await was cut short (Ctrl-C, a timeout), stays in the state with an
  init error, and the engine runs an empty update for it on the next `up` (pulumi/pulumi
  pkg/resource/deploy/step_generator.go), which awaits the live Job again: a running Job is
  waited for, a failed one fails `up` at once, every time, since the Job controller never runs a
  Job with a Failed condition again;
- with the annotation `pulumi.com/replaceUnready: "true"` in the new inputs, Diff reads the live
  Job and replaces it (deleting it first, as it keeps its name) whenever the Job is not complete:
  a failed Job and a running one alike.

So the annotation alone kills a 60-minute image build or a 48-hour sweep that a re-run of `up`
finds running, and without it a failed Job never runs again. The program sets the annotation
only on a Job whose Failed condition is True when the program runs, a state no later event can
undo: a running Job is then awaited, a failed one replaced. Reading the Job needs the cluster's
address and credentials, which the lab's kubeconfig (the host bootstrap's output, or the
stack's own, checked by lab.kubeapi) carries; the official client reads it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import urllib3
from kubernetes import client as k8s_client

from lab import kubeapi

# pulumi-kubernetes provider/pkg/metadata/annotations.go AnnotationReplaceUnready.
REPLACE_UNREADY = {"pulumi.com/replaceUnready": "true"}
TIMEOUT_SECONDS = 10
# The objects the program reads, by kind: the official client's read of one by name and namespace.
READS: dict[str, Callable[[k8s_client.ApiClient], Callable[..., Any]]] = {
    "Job": lambda api: k8s_client.BatchV1Api(api).read_namespaced_job,
    "StatefulSet": lambda api: k8s_client.AppsV1Api(api).read_namespaced_stateful_set,
}


def read_object(
    kubeconfig: str, kind: str, namespace: str, name: str, allow_commands: bool = False
) -> dict[str, Any] | None:
    """The live object `kind` `namespace/name` as the API server wrote it, or None when there is
    none to read: no such object, no cluster yet, an unreachable or refusing API server, an answer
    that is no JSON object, a kubeconfig lab.kubeapi refuses (the stack's is refused with the stack)."""
    try:
        api = kubeapi.api_client(kubeapi.load(kubeconfig, allow_commands=allow_commands))
        with api:
            # Unparsed: the program reads fields (managedFields' fieldsV1) as the server wrote them.
            reply = READS[kind](api)(
                name, namespace, _preload_content=False, _request_timeout=TIMEOUT_SECONDS
            )
            found = json.loads(reply.data)
    # HTTPError: urllib3's, for a connection refused, reset or cut mid-reply; ApiException: an
    # answer other than 2xx; ValueError: a body that is no JSON.
    except (
        kubeapi.KubeconfigRefused,
        k8s_client.ApiException,
        urllib3.exceptions.HTTPError,
        OSError,
        ValueError,
    ):
        return None
    return found if isinstance(found, dict) else None


def has_failed(kubeconfig: str, namespace: str, name: str, allow_commands: bool = False) -> bool:
    """Whether the Job `namespace/name` exists with its Failed condition True. Anything else (no
    such Job, no cluster yet, an unreachable or refusing API server) is False: then nothing is
    replaced, and `up` awaits the Job as pulumi-kubernetes would."""
    job = read_object(kubeconfig, "Job", namespace, name, allow_commands)
    if job is None:
        return False
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Failed" and c.get("status") == "True" for c in conditions)


def replace_if_failed(
    kubeconfig: str, namespace: str, name: str, allow_commands: bool = False
) -> dict[str, str]:
    """The annotations of a Job the lab awaits: replaced on the next `up` once failed, never while it runs."""
    failed = kubeconfig and has_failed(kubeconfig, namespace, name, allow_commands)
    return dict(REPLACE_UNREADY) if failed else {}
