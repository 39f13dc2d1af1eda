"""`python -m trainer launch -- train ...`: one pod as one torchrun node of a multi-pod job.

Each pod of the training StatefulSet runs one torchrun agent with one worker, so that a rank's
failure inside the pod takes torchrun's elastic path (the agents meet again through the c10d
rendezvous, the workers restart and resume from the checkpoint), the path the test machines
exercise. Everything torchrun needs comes from the pod's environment: the world size
(`WORLD_SIZE`, one node per pod), rank 0's stable name and the rendezvous port (`MASTER_ADDR`,
`MASTER_PORT`), this pod's index (the same rules as the trainer's own: `RANK`, else the ordinal
ending `POD_NAME`) and this pod's own DNS name (`LAB_LOCAL_ADDR`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from trainer import contract

RDZV_BACKEND = "c10d"


def torchrun_command(env: Mapping[str, str], trainer_args: Sequence[str], max_restarts: int) -> list[str]:
    """The torchrun command line for this pod, running `python -m trainer <trainer_args>`."""
    from trainer import distributed

    place = distributed.topology(env)
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
        f"--nnodes={place.world_size}", "--nproc-per-node=1",
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
