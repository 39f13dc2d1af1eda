"""Where this process sits in the job: rank and world from the environment, the process group, DDP.

Ranks come from torchrun's variables, or from a StatefulSet pod's (`RANK`, or the ordinal at the
end of `POD_NAME`), or from torchrun's `PET_*` inputs when a pod sets those instead.

Ranks exchange tensors of numbers only. Besides the model's, they share a few texts and numbers,
encoded here into fixed-size tensors and decoded against a strict rule; never Python objects:
torch's `*_object` collectives unpickle what a peer sends (torch/distributed/distributed_c10d.py,
`_tensor_to_object`), which runs whatever a forged peer puts there.
"""

from __future__ import annotations

import datetime
import inspect
import math
import os
import re
import socket
import time
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel

from trainer import contract, inputs
from trainer.errors import TrainerError

DEFAULT_TIMEOUT_SECONDS = 300
# The longest a collective may wait: a week, far beyond any step, and well within what
# datetime.timedelta and torch's millisecond clocks hold (10**20 seconds overflows both).
MAX_TIMEOUT_SECONDS = 7 * 24 * 3600
# Steps between two agreements on the stop flag where each costs a device sync (an all-reduce on
# the GPU read back by the host). At airbench's 6 ms a step that is 0.1 s of delay, far inside
# torchrun's 30 s between SIGTERM and SIGKILL; a slower step (a wider net) still fits 16 of them.
STOP_CHECK_STEPS = 16
# A TCP port is 16 bits; torch's store takes a larger one as is and fails deep inside.
MAX_PORT = 65535
# The longest text ranks exchange (a device name, a checkpoint's file name), in UTF-8 bytes.
MAX_TEXT_BYTES = 255
# DDP's switch for the buffers' broadcast before every forward, by the name this torch gives it.
SYNC_BUFFERS_FLAG = (
    "forward_sync_buffers"
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters
    else "broadcast_buffers"
)


class JobEnvironmentError(TrainerError):
    """The job's environment does not describe a valid rank; the message names the variable."""


class PeerDataError(TrainerError):
    """A peer sent what the exchange does not allow; nothing of it is used."""


@dataclass(frozen=True)
class Topology:
    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int


def _first(env: Mapping[str, str], *names: str) -> tuple[str, str] | None:
    for name in names:
        if env.get(name, "") != "":
            return name, env[name]
    return None


def _integer(name: str, value: str, minimum: int, maximum: int | None = None) -> int:
    try:
        number = inputs.integer(value)
    except ValueError:
        raise JobEnvironmentError(f"{name}={value[:40]!r} is not an integer") from None
    if number < minimum or (maximum is not None and number > maximum):
        bounds = f"from {minimum} to {maximum}" if maximum is not None else f"at least {minimum}"
        raise JobEnvironmentError(f"{name}={number} must be {bounds}")
    return number


def _rank(env: Mapping[str, str]) -> int:
    found = _first(env, contract.RANK, "PET_NODE_RANK")
    if found:
        return _integer(*found, minimum=0)
    match = re.search(r"-([0-9]+)$", env.get(contract.POD_NAME, ""))
    if match:
        return int(match.group(1))
    raise JobEnvironmentError(
        "WORLD_SIZE is above 1 but no rank is set: set RANK (torchrun does), or POD_NAME ending in"
        " -<ordinal> as a StatefulSet pod has"
    )


def topology(env: Mapping[str, str]) -> Topology:
    """This process's place in the job; a single process when no world size is set."""
    world = _first(env, contract.WORLD_SIZE, "PET_NNODES")
    world_size = _integer(*world, minimum=1) if world else 1
    if world_size == 1:
        return Topology(0, 1, 0, "127.0.0.1", 0)
    rank = _rank(env)
    if rank >= world_size:
        raise JobEnvironmentError(
            f"rank {rank} is not below WORLD_SIZE={world_size}: ranks run 0 to {world_size - 1};"
            " check the replica count against WORLD_SIZE"
        )
    addr = _first(env, contract.MASTER_ADDR, "PET_MASTER_ADDR")
    port = _first(env, contract.MASTER_PORT, "PET_MASTER_PORT")
    required = ((contract.MASTER_ADDR, addr), (contract.MASTER_PORT, port))
    missing = [name for name, found in required if not found]
    if missing:
        raise JobEnvironmentError(
            f"{' and '.join(missing)} not set: with WORLD_SIZE={world_size} every rank needs rank 0's"
            " address and port (MASTER_ADDR=<rank 0 host>, MASTER_PORT=29500)"
        )
    assert addr and port
    local = _first(env, "LOCAL_RANK")
    return Topology(
        rank=rank,
        world_size=world_size,
        local_rank=_integer(*local, minimum=0) if local else 0,
        master_addr=addr[1],
        master_port=_integer(*port, minimum=1, maximum=MAX_PORT),
    )


def apply_socket_interfaces(env: MutableMapping[str, str]) -> str | None:
    """Pick this node's NIC for NCCL and Gloo from LAB_SOCKET_IFNAMES="nodeA=eth0,nodeB=eno1"."""
    spec = env.get(contract.LAB_SOCKET_IFNAMES, "")
    if not spec:
        return None
    pairs = [item.split("=", 1) for item in spec.split(",") if item.strip()]
    if any(len(pair) != 2 or not pair[0] or not pair[1] for pair in pairs):
        raise JobEnvironmentError(f"LAB_SOCKET_IFNAMES={spec!r} must read node=interface[,node=interface]")
    node = env.get(contract.NODE_NAME, "")
    interface = dict(pairs).get(node)
    if interface is None:
        return None
    for name in contract.SOCKET_IFNAME_VARIABLES:
        env.setdefault(name, interface)
    return interface


def choose_backend(requested: str) -> str:
    if requested == contract.AUTO:
        return contract.NCCL if torch.cuda.is_available() else contract.GLOO
    if requested == contract.NCCL and not torch.cuda.is_available():
        raise JobEnvironmentError("--backend nccl needs a CUDA GPU and none is visible; use gloo or auto")
    return requested


def device_for(place: Topology, backend: str) -> torch.device:
    if torch.cuda.is_available():
        torch.cuda.set_device(place.local_rank % torch.cuda.device_count())
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def timeout_seconds(flag: int | None, env: Mapping[str, str]) -> int:
    if flag is not None:
        if flag > MAX_TIMEOUT_SECONDS:
            raise JobEnvironmentError(
                f"--timeout-seconds {inputs.excerpt(str(flag))} must be at most {MAX_TIMEOUT_SECONDS}"
                " (a week); give fewer seconds"
            )
        return flag
    value = env.get("LAB_COLLECTIVE_TIMEOUT")
    if not value:
        return DEFAULT_TIMEOUT_SECONDS
    return _integer("LAB_COLLECTIVE_TIMEOUT", value, minimum=1, maximum=MAX_TIMEOUT_SECONDS)


def join(place: Topology, backend: str, timeout: int) -> None:
    """Join the process group through rank 0's store; a failure names the address and what to check."""
    if place.world_size == 1:
        return
    where = f"{place.master_addr}:{place.master_port}"
    _resolve(place.master_addr, where, timeout)
    limit = datetime.timedelta(seconds=timeout)
    # When torchrun's agent serves the store and keeps it across restarts, a prefix per attempt
    # keeps a restarted rank from reading its peers' stale addresses (as torch's env:// does).
    # Otherwise every round has a fresh store on a new port and needs none: the agents' restart
    # counts drift apart when only one of them saw the failure, and a per-attempt prefix would
    # then keep the ranks from ever meeting.
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") if agent_store else "fresh"
    try:
        store = dist.TCPStore(
            place.master_addr,
            place.master_port,
            place.world_size,
            is_master=place.rank == 0 and not agent_store,
            timeout=limit,
        )
        dist.init_process_group(
            backend,
            store=dist.PrefixStore(f"k8scifar/attempt-{attempt}", store),
            rank=place.rank,
            world_size=place.world_size,
            timeout=limit,
        )
    except (dist.DistError, RuntimeError, ValueError) as err:
        cause = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
        raise JobEnvironmentError(
            f"rank {place.rank} could not rendezvous with rank 0 at {where} (timeout {timeout} s: {cause}):"
            " check that rank 0 is running, that the port is open in the firewall between the nodes,"
            " and that NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME (or LAB_SOCKET_IFNAMES) name an"
            " interface that reaches it"
        ) from None


def _resolve(host: str, where: str, timeout: int) -> None:
    # Rank 0's DNS name appears only once its pod exists: keep asking until the timeout.
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.getaddrinfo(host, None)
            return
        except socket.gaierror:
            if time.monotonic() >= deadline:
                raise JobEnvironmentError(
                    f"MASTER_ADDR {host!r} ({where}) does not resolve after {timeout} s: check the"
                    " headless Service name or the host name"
                ) from None
            time.sleep(1)


def wrap(
    net: torch.nn.Module, device: torch.device, compression: str, gradients: torch.dtype
) -> torch.nn.Module:
    """DDP around `net` with the chosen gradient compression; the net itself in a single process.

    `gradients` is the dtype of the net's weights (trainer.precision): where it is 16-bit already,
    fp16 and bf16 compression would halve nothing, and bf16's cast from float16 would drop three
    bits of every gradient, so rank 0 says so and no hook is registered.
    """
    if not dist.is_initialized():
        return net
    ids = [device.index] if device.type == "cuda" else None
    # For small, fast steps (docs/scaling.md, "DDP for small steps"): gradients live in the
    # all-reduce buckets (no copy in or out), the graph is the same every step (DDP plans its
    # buckets once), and BatchNorm's running statistics are not broadcast before every forward:
    # only evaluation reads them, and `evaluate` broadcasts rank 0's first (broadcast_buffers).
    # torch 2.14 names this forward_sync_buffers (torch/nn/parallel/distributed.py); buffers are
    # still synced once at init, so every rank starts from rank 0's. Older torch (2.11, on the GPU
    # machines the benchmarks use) knows only broadcast_buffers, which also skips the sync at init
    # (every rank builds the same buffers from the same seed, so they agree there too).
    no_buffer_sync = {SYNC_BUFFERS_FLAG: False}
    model = DistributedDataParallel(
        net, device_ids=ids, gradient_as_bucket_view=True, static_graph=True, **no_buffer_sync
    )
    if compression in (contract.FP16, contract.BF16) and gradients.itemsize == 2:
        if dist.get_rank() == 0:
            print(
                f"--compression {compression} left out: the gradients on {device.type} are {gradients}"
                " already, half the bytes of float32",
                flush=True,
            )
    elif compression == contract.FP16:
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif compression == contract.BF16:
        model.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif compression == contract.POWERSGD:
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=2, start_powerSGD_iter=10
        )
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    return model


def stop_check_steps() -> int:
    """How often ranks agree on stopping: every step where the collective stays on the host (one
    process, or gloo, whose all-reduce is a CPU round trip), every STOP_CHECK_STEPS on NCCL."""
    if dist.is_initialized() and dist.get_backend() == contract.NCCL:
        return STOP_CHECK_STEPS
    return 1


def any_rank(flag: bool) -> bool:
    """True on every rank when `flag` is true on any: ranks agree on stopping at the same step."""
    if not dist.is_initialized():
        return flag
    value = torch.tensor([int(flag)], device=_collective_device())
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def sum_all(values: list[float]) -> list[float]:
    """Element-wise sums over the ranks (float64 so the totals are exact for counts)."""
    if not dist.is_initialized():
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=_collective_device())
    dist.all_reduce(tensor)
    return tensor.tolist()


def broadcast_buffers(net: torch.nn.Module) -> None:
    """Give every rank rank 0's BatchNorm statistics, which DDP syncs only at training forwards."""
    if dist.is_initialized():
        for buffer in net.buffers():
            dist.broadcast(buffer, 0)


def _encode(text: str | None) -> torch.Tensor:
    """A row of 1 + MAX_TEXT_BYTES bytes: 1 and the UTF-8 text padded with zeros, or all zeros for None."""
    row = torch.zeros(1 + MAX_TEXT_BYTES, dtype=torch.uint8)
    if text is not None:
        data = text.encode()
        if len(data) > MAX_TEXT_BYTES or b"\0" in data:
            raise ValueError(
                f"{text[:40]!r}... is no text ranks exchange (at most {MAX_TEXT_BYTES} bytes, no NUL)"
            )
        row[0] = 1
        row[1 : 1 + len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return row


def _decode(row: torch.Tensor, rule: re.Pattern[str], what: str) -> str | None:
    """The text in `row`, or None; PeerDataError unless it is exactly what `_encode` writes and
    `rule` matches all of it."""
    data = bytes(row.cpu().tolist())
    flag, body = data[0], data[1:].rstrip(b"\0")
    if flag == 0 and not body:
        return None
    try:
        text = body.decode() if flag == 1 and b"\0" not in body else None
    except UnicodeDecodeError:
        text = None
    if text is None or not rule.fullmatch(text):
        raise PeerDataError(
            f"a peer sent {body[:60]!r} where {what} belongs; every rank must run the same trainer"
            " image, and only the job's own pods may reach its rendezvous and collectives ports"
            " (see docs/security.md)"
        )
    return text


def share_text(text: str | None, rule: re.Pattern[str], what: str) -> str | None:
    """Rank 0's `text` (or None) on every rank, refused unless `rule` matches all of it."""
    if not dist.is_initialized():
        return text
    row = _encode(text if dist.get_rank() == 0 else None).to(_collective_device())
    dist.broadcast(row, 0)
    return _decode(row, rule, what)


def gather_text(text: str, rule: re.Pattern[str], what: str) -> list[str]:
    """Every rank's `text`, in rank order, each refused unless `rule` matches all of it."""
    if not dist.is_initialized():
        return [text]
    row = _encode(text).to(_collective_device())
    rows = [torch.empty_like(row) for _ in range(dist.get_world_size())]
    dist.all_gather(rows, row)
    found = [_decode(r, rule, what) for r in rows]
    if any(t is None for t in found):
        raise PeerDataError(f"a peer sent no {what}")
    return [t for t in found if t is not None]


def share_number(value: float | None) -> float | None:
    """Rank 0's finite `value` (or None) on every rank, as two float64s: (1, value) or (0, 0)."""
    if not dist.is_initialized():
        return value
    sent = [0.0, 0.0] if value is None or dist.get_rank() != 0 else [1.0, float(value)]
    pair = torch.tensor(sent, dtype=torch.float64, device=_collective_device())
    dist.broadcast(pair, 0)
    flag, number = pair.tolist()
    if (flag, number) == (0.0, 0.0):
        return None
    if flag != 1.0 or not math.isfinite(number):
        raise PeerDataError(f"a peer sent ({flag}, {number}) where a number or none belongs")
    return number


def _collective_device() -> torch.device:
    return (
        torch.device("cuda", torch.cuda.current_device())
        if dist.get_backend() == contract.NCCL
        else torch.device("cpu")
    )


def leave(finished: bool) -> None:
    """Leave the group. After a finished run the ranks first meet, so none tears down its
    connections while a peer is still using them (gloo aborts the peer when that happens)."""
    if dist.is_initialized():
        if finished:
            dist.barrier()
        dist.destroy_process_group()
