"""What pulumi-kubernetes and the Pulumi engine do with a Job the lab awaits, on a later `pulumi up`.

Read in pulumi/pulumi-kubernetes at the newest stored main (after v4.32.0, July 2026; the lab locks
v4.34.2, whose source could not be had here; the annotation and the Job checker are unchanged
since #1578, 2021):

- Diff (provider/pkg/provider/provider.go): when the new inputs carry
  `pulumi.com/replaceUnready: "true"` (metadata.ReplaceUnready, IsAnnotationTrue: the text
  `true`) and the kind is Job, the live Job is read and, unless it is ready, the diff asks for a
  replacement; a named object that keeps its name is deleted before it is replaced.
- Ready (provider/pkg/await/checker/job/check.go): `status.startTime` is set and the Complete
  condition is True. A Failed condition with reason BackoffLimitExceeded or DeadlineExceeded is
  an error, which ends the await at once (provider/pkg/await/job.go).
- pulumi/pulumi pkg/resource/deploy/step_generator.go: a resource whose earlier await failed or
  was cut short keeps init errors in the state, and with no diff the engine runs an empty update,
  which awaits the live Job again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ANNOTATION = "pulumi.com/replaceUnready"
TERMINAL_REASONS = {"BackoffLimitExceeded", "DeadlineExceeded"}


def _condition(job: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    return next((c for c in job.get("status", {}).get("conditions", []) if c.get("type") == kind), None)


def ready(job: Mapping[str, Any]) -> bool:
    complete = _condition(job, "Complete")
    return bool(job.get("status", {}).get("startTime")) and bool(
        complete and complete.get("status") == "True"
    )


def diff_replaces(inputs: Mapping[str, Any], live: Mapping[str, Any]) -> bool:
    """Whether Diff replaces the Job whose new inputs are `inputs` and whose live object is `live`."""
    annotations = inputs.get("metadata", {}).get("annotations") or {}
    return inputs.get("kind", "Job") == "Job" and annotations.get(ANNOTATION) == "true" and not ready(live)


def await_outcome(live: Mapping[str, Any]) -> str:
    """What the (re-)await of a live Job comes to: `done`, `fails` at once, or `waits`."""
    failed = _condition(live, "Failed")
    if failed and failed.get("status") == "True" and failed.get("reason") in TERMINAL_REASONS:
        return "fails"
    return "done" if ready(live) else "waits"


def next_up(inputs: Mapping[str, Any], live: Mapping[str, Any]) -> str:
    """What the next `pulumi up` does to a Job left with init errors (its last await failed or was
    cut short): `replaced` (deleted, then created again), or the outcome of awaiting it again."""
    return "replaced" if diff_replaces(inputs, live) else await_outcome(live)


def job(state: str) -> dict[str, Any]:
    """A live Job as the API server reports it: `running`, `failed` (backoff limit) or `complete`."""
    status: dict[str, Any] = {"startTime": "2026-01-01T00:00:00Z"}
    if state == "running":
        status["active"] = 1
    elif state == "failed":
        status["failed"] = 3
        status["conditions"] = [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]
    elif state == "complete":
        status["succeeded"] = 1
        status["conditions"] = [{"type": "Complete", "status": "True"}]
    return {"apiVersion": "batch/v1", "kind": "Job", "status": status}
