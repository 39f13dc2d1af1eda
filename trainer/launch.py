"""`python -m trainer launch -- train ...`: one pod as one torchrun node of a multi-pod job.

Each pod of the training StatefulSet runs one torchrun agent with one worker per GPU of the pod,
so that a rank's failure inside the pod takes torchrun's elastic path (the agents meet again
through the c10d rendezvous, the workers restart and resume from the checkpoint), the path the
test machines exercise. Everything torchrun needs comes from the pod's environment: the world
size (`WORLD_SIZE`, every rank of the job) and the ranks of each pod (`PET_NPROC_PER_NODE`, 1 when
unset), whose quotient is the number of pods, rank 0's stable name and the rendezvous port
(`MASTER_ADDR`, `MASTER_PORT`), this pod's index (the same rules as the trainer's own: `RANK`, else
the ordinal ending `POD_NAME`) and this pod's own DNS name (`LAB_LOCAL_ADDR`). torchrun gives the
agent at node rank k the global ranks k*n to k*n+n-1 (torch 2.14,
torch/distributed/elastic/agent/server/api.py `_assign_worker_ranks`: a block as long as each
agent's own worker count, in node-rank order), so global rank 0 runs in pod 0.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from trainer import contract, inputs

RDZV_BACKEND = "c10d"


def torchrun_command(env: Mapping[str, str], trainer_args: Sequence[str], max_restarts: int) -> list[str]:
    """The torchrun command line for this pod, running `python -m trainer <trainer_args>`."""
    from trainer import distributed

    place = distributed.topology(env)
    per_pod = env.get(contract.NPROC_PER_NODE, "") or "1"
    if not inputs.is_digits(per_pod) or int(per_pod) < 1 or place.world_size % int(per_pod):
        raise distributed.JobEnvironmentError(
            f"{contract.NPROC_PER_NODE}={per_pod[:20]!r} must be a whole number of ranks per pod that"
            f" divides WORLD_SIZE={place.world_size}"
        )
    pods = place.world_size // int(per_pod)
    if place.rank >= pods:
        raise distributed.JobEnvironmentError(
            f"pod {place.rank} is not below the job's {pods} pods (WORLD_SIZE={place.world_size},"
            f" {contract.NPROC_PER_NODE}={per_pod}); check the replica count against both"
        )
    address, port = env.get(contract.MASTER_ADDR, ""), env.get(contract.MASTER_PORT, "")
    if not address or not port:
        raise distributed.JobEnvironmentError(
            "MASTER_ADDR and MASTER_PORT must name rank 0's pod and the rendezvous port"
        )
    run_id = (
        trainer_args[trainer_args.index("--run-name") + 1] if "--run-name" in trainer_args else "k8scifar"
    )
    command = [
        sys.executable, "-m", "torch.distributed.run",
        f"--nnodes={pods}", f"--nproc-per-node={per_pod}",
        f"--rdzv-backend={RDZV_BACKEND}", f"--rdzv-endpoint={address}:{port}", f"--rdzv-id={run_id}",
        # Pod 0 hosts the rendezvous store. torchrun would guess it by comparing names and addresses,
        # which a pod on the host network (the node's hostname) defeats.
        f"--rdzv-conf=is_host={int(place.rank == 0)}",
        f"--max-restarts={max_restarts}",
    ]  # fmt: skip
    local = env.get(contract.LAB_LOCAL_ADDR, "")
    if local:
        # The address peers reach this pod at; c10d also orders the nodes' ranks by it, so the
        # ranks follow the pods' DNS names (trainer-0, trainer-1, ...).
        command.append(f"--local-addr={local}")
    return [*command, "-m", "trainer", *trainer_args]


def worker_environment(env: Mapping[str, str]) -> dict[str, str]:
    # A fresh store per worker group: the agents' shared store keys workers by each agent's own
    # restart count, which drifts apart when only one pod saw the failure, and strands the next
    # rendezvous (the test machines run torchrun the same way).
    return {**env, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def launch(trainer_args: Sequence[str], max_restarts: int) -> None:
    """Replace this process with torchrun, so that the pod's SIGTERM reaches torchrun directly."""
    command = torchrun_command(os.environ, trainer_args, max_restarts)
    sys.stdout.flush()
    os.execve(command[0], command, worker_environment(os.environ))
