"""The names the orchestrator (`lab/`) and the trainer agree on, written once: the environment a
rank's pod carries, where its volumes are mounted, what a run folder holds, and the choices
(models, backends, compressions) both sides accept.

Standard library only and nothing imported: the trainer image carries only `trainer/`, and the
Pulumi program and `labctl` import this on machines without torch. tests/test_contract.py fails
when one of these values is written as a literal anywhere else.
"""

from __future__ import annotations

# A rank's environment. torchrun's own names for rank 0's address and port, the world size and the
# rank (https://pytorch.org/docs/stable/elastic/run.html, "Environment Variables").
MASTER_ADDR = "MASTER_ADDR"
MASTER_PORT = "MASTER_PORT"
WORLD_SIZE = "WORLD_SIZE"
RANK = "RANK"
# The ranks of one pod (torchrun workers, one per GPU of the pod), under torchrun's own name for
# `--nproc-per-node`; WORLD_SIZE counts every rank, so a job has WORLD_SIZE / this many pods.
NPROC_PER_NODE = "PET_NPROC_PER_NODE"
# The pod's own name (its StatefulSet ordinal ends it) and its node's, from the downward API.
POD_NAME = "POD_NAME"
NODE_NAME = "NODE_NAME"
# The lab's own: each node's interface ("nodeA=eth0,nodeB=eno1") and the pod's DNS name.
LAB_SOCKET_IFNAMES = "LAB_SOCKET_IFNAMES"
LAB_LOCAL_ADDR = "LAB_LOCAL_ADDR"
# The interface NCCL and Gloo bind to
# (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-socket-ifname).
NCCL_SOCKET_IFNAME = "NCCL_SOCKET_IFNAME"
GLOO_SOCKET_IFNAME = "GLOO_SOCKET_IFNAME"
SOCKET_IFNAME_VARIABLES = (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME)

# Where a trainer pod finds the dataset (read-only) and writes its run folders.
DATA_MOUNT = "/data"
# The dataset under it, in CIFAR-10's own python layout (www.cs.toronto.edu/~kriz/cifar.html).
DATASET_FOLDER = "cifar-10-batches-py"
TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILE = "test_batch"
META_FILE = "batches.meta"
RUNS_MOUNT = "/runs"

# A run folder: a line per epoch, the live status, the final summary, the curves, and the
# checkpoints with the pointer to the newest complete one.
METRICS_FILE = "metrics.jsonl"
STATUS_FILE = "status.json"
SUMMARY_FILE = "summary.json"
CURVES_FILE = "curves.png"
CHECKPOINTS_DIR = "checkpoints"
LATEST_CHECKPOINT = "latest"
RUN_FILES = (STATUS_FILE, SUMMARY_FILE, METRICS_FILE)
# What a run trained on, named in its summary, its status and every metrics line (and on its
# curves): CIFAR-10's own files, checked against their published sums, or a set in CIFAR-10's
# format that `data synthetic` generated (tests, `labctl try` without a download), whose accuracy
# says nothing about CIFAR-10.
TRAINED_ON = "trained_on"
CIFAR10 = "CIFAR-10"
GENERATED = "a generated CIFAR-format set, NOT CIFAR-10"

AIRBENCH = "airbench"
RESNET9 = "resnet9"
MODELS = (AIRBENCH, RESNET9)

# `auto`: NCCL where a CUDA GPU is visible, Gloo otherwise.
AUTO = "auto"
NCCL = "nccl"
GLOO = "gloo"
BACKENDS = (AUTO, NCCL, GLOO)

# Gradient compression through DDP's communication hooks.
NO_COMPRESSION = "none"
FP16 = "fp16"
BF16 = "bf16"
POWERSGD = "powersgd"
COMPRESSIONS = (NO_COMPRESSION, FP16, BF16, POWERSGD)
