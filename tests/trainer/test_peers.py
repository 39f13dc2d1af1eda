"""What ranks send each other: tensors of numbers and bytes the trainer decodes by a strict rule,
never a pickle (torch's `*_object` collectives unpickle what a peer sends, and with
`trainer.hostNetwork` a peer is whoever reaches the node's ports)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

from tests.support.network import free_port
from tests.support.trainer_runs import ROOT, TORCHRUN, run, strict_json

TINY = ["--width", "8", "--batch-size", "128", "--tta", "0", "--epochs", "1"]

# Runs `python -m trainer ...` with every way torch decodes a peer's object made to fail: the
# *_object collectives all decode through `_tensor_to_object` (torch/distributed/distributed_c10d.py).
NO_PICKLE = """
import pickle, runpy, sys
import torch.distributed.distributed_c10d as c10d

def refuse(*args, **kwargs):
    raise SystemExit("a peer's object crossed as a pickle")

c10d._tensor_to_object = c10d._object_to_tensor = pickle.loads = refuse
sys.argv[0] = "trainer"
runpy.run_module("trainer", run_name="__main__", alter_sys=True)
"""


def _torchrun_script(script: Path, *args: str | Path) -> list[str]:
    return [
        str(TORCHRUN), "--nproc-per-node=2", "--max-restarts=0", "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{free_port()}", str(script), *map(str, args),
    ]  # fmt: skip


def test_ranks_train_resume_and_find_a_run_complete_without_unpickling(dataset: Path, tmp_path: Path) -> None:
    """Every exchange of a run: whether rank 0 found it complete (and its accuracy), the device
    names, the checkpoint to resume; each as the trainer's own tensors."""
    script = tmp_path / "no_pickle.py"
    script.write_text(NO_PICKLE)
    train = ["train", "--data", dataset, "--runs", tmp_path, "--run-name", "r", *TINY]
    first = run(_torchrun_script(script, *train))
    assert first.returncode == 0, first.stderr[-3000:]
    run_dir = tmp_path / "r"
    summary = strict_json((run_dir / "summary.json").read_text())
    assert len(summary["devices"]) == 2 and summary["devices"][0].startswith("cpu (")

    # As if killed before its final evaluation: rank 0 names the checkpoint to resume.
    (run_dir / "summary.json").unlink()
    (run_dir / "status.json").unlink()
    resumed = run(_torchrun_script(script, *train))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stdout and "ckpt-000000012.pt" in resumed.stdout

    complete = run(_torchrun_script(script, *train))
    assert complete.returncode == 0, complete.stderr[-3000:]
    assert "is already complete (best test accuracy" in complete.stdout


class _Payload:
    """What a forged peer would send: unpickling it writes a file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (str(self.marker), "w"))


# Rank 0 is a forged peer sending raw bytes through the same collectives; rank 1 is the trainer's
# own decoding. Each exchange prints what rank 1 made of it.
FORGED = """
import json, sys
import torch, torch.distributed as dist
from trainer import distributed
from trainer.records import checkpoint
from trainer.train import DEVICE_NAME

dist.init_process_group("gloo")
payload = bytes.fromhex(sys.argv[1])
rank = dist.get_rank()

def row(data):
    t = torch.zeros(1 + distributed.MAX_TEXT_BYTES, dtype=torch.uint8)
    t[0] = 1
    t[1 : 1 + len(data)] = torch.tensor(list(data), dtype=torch.uint8)
    return t

def outcome(call):
    try:
        return {"value": call()}
    except distributed.PeerDataError as err:
        return {"refused": str(err)}

def checkpoint_name():
    return distributed.share_text(None, checkpoint.PATTERN, "a checkpoint's file name")

results = []
# A pickle where a checkpoint's file name belongs.
if rank == 0:
    dist.broadcast(row(payload[: distributed.MAX_TEXT_BYTES]), 0)
else:
    results.append(outcome(checkpoint_name))
# A path out of the run folder.
if rank == 0:
    dist.broadcast(row(b"../../../etc/shadow"), 0)
else:
    results.append(outcome(checkpoint_name))
# Bytes that are no UTF-8 where a device name belongs.
if rank == 0:
    forged = row(b"\\xff\\xfe")
    dist.all_gather([torch.empty_like(forged) for _ in range(2)], forged)
else:
    mine = "cpu (x86_64, 1 threads)"
    results.append(outcome(lambda: distributed.gather_text(mine, DEVICE_NAME, "a device name")))
# A flag that is neither 0 nor 1 where a number belongs.
if rank == 0:
    dist.broadcast(torch.tensor([7.0, 0.5], dtype=torch.float64), 0)
else:
    results.append(outcome(lambda: distributed.share_number(None)))
if rank:
    print(json.dumps(results), flush=True)
dist.barrier()
dist.destroy_process_group()
"""


def test_a_forged_peers_pickle_is_refused_as_data_and_never_loaded(tmp_path: Path) -> None:
    marker = tmp_path / "unpickled"
    payload = pickle.dumps(_Payload(marker))
    assert len(payload) <= 255
    script = tmp_path / "forged.py"
    script.write_text(FORGED)
    result = run(_torchrun_script(script, payload.hex()), PYTHONPATH=str(ROOT))
    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("[")]
    results = json.loads(line)
    assert len(results) == 4 and all("refused" in r for r in results), results
    assert results[0]["refused"].startswith(
        f"a peer sent {payload[:60]!r} where a checkpoint's file name belongs"
    )
    assert "b'../../../etc/shadow' where a checkpoint's file name belongs" in results[1]["refused"]
    assert "where a device name belongs" in results[2]["refused"]
    assert results[3]["refused"] == "a peer sent (7.0, 0.5) where a number or none belongs"
    assert not marker.exists(), "the pickle was loaded"
