"""What the lab runs on its machines: the training run, the sweep, how they are scheduled and watched."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import Field, field_validator, model_validator

from lab.config.facts import EPHEMERAL_PORTS, NOBODY_UID, NODE_EXPORTER_PORT, TRAINER_UID_MIN
from lab.config.keys import KeyModel
from trainer import contract
from trainer import sweep as trainer_sweep
from trainer.hyperparameters import HYPERPARAMETERS, Rule
from trainer.hyperparameters import check as check_hyperparameter


class Placement(StrEnum):
    SPREAD = "spread"  # one rank per node: required pod anti-affinity
    PACK = "pack"  # every rank on one node: required pod affinity


class Backend(StrEnum):
    AUTO = contract.AUTO
    NCCL = contract.NCCL
    GLOO = contract.GLOO


class Compression(StrEnum):
    NONE = contract.NO_COMPRESSION
    FP16 = contract.FP16
    BF16 = contract.BF16
    POWERSGD = contract.POWERSGD


class Model(StrEnum):
    AIRBENCH = contract.AIRBENCH
    RESNET9 = contract.RESNET9


class SweepStrategy(StrEnum):
    GRID = "grid"
    RANDOM = "random"


def _hyperparameter(name: str, more: str = "") -> Any:
    """A `trainer` key that sets the trainer's hyperparameter `name`: its default, its bounds and
    its description from the table in trainer/hyperparameters.py, and `more` the stack adds."""
    row = HYPERPARAMETERS[name]
    bounds = row.rule.bounds() if isinstance(row.rule, Rule) else {}
    # Validated, so a choice's default is the key's enum member, as a value the file gives is.
    return Field(default=row.common, validate_default=True, **bounds, description=row.description() + more)


class Trainer(KeyModel):
    """The DDP training run the StatefulSet executes."""

    model: Model = _hyperparameter("model")
    replicas: int | None = Field(
        default=None,
        ge=1,
        description="Ranks, a GPU each on GPU labs; default: every GPU of the lab (with pack and no"
        " Kueue, the largest node's), one rank per node on CPU labs (docs/scaling.md).",
    )
    placement: Placement = Field(
        default=Placement.SPREAD, description="`spread` (pods on different nodes) or `pack` (fewest nodes)."
    )
    epochs: int | None = _hyperparameter("epochs", " Not with `steps`.")
    steps: int | None = _hyperparameter("steps", " Not with `epochs`.")
    batch_size: int = _hyperparameter(
        "batch_size",
        " A multiple of the ranks. Left out: the default, or the nearest batch that splits evenly over"
        " the ranks where the default does not, which `pulumi up` and `doctor` say.",
    )
    learning_rate: float | None = _hyperparameter("lr")
    seed: int = _hyperparameter("seed")
    backend: Backend = Field(default=Backend.AUTO, description="`auto`, `nccl` or `gloo`.")
    compression: Compression = _hyperparameter("compression")
    target_accuracy: float = _hyperparameter("target_accuracy")
    port: int = Field(
        default=29500,
        ge=1024,
        le=65535,
        description="Rendezvous port (MASTER_PORT); not a TCP port the nodes hold (the cluster's"
        " programs', the registry's, the node exporter's), nor SSH's or a NodePort with hostNetwork.",
    )
    host_network: bool = Field(
        default=False,
        description="Run ranks on the host network (faster collectives, node interfaces).",
    )
    # Above 2**31 - 1, tools that keep uids as signed 32-bit numbers misread it.
    uid: int = Field(
        default=10001,
        ge=TRAINER_UID_MIN,
        le=2**31 - 1,
        description="Non-root user the pods and the export use; not a login user of the hosts"
        f" (`labctl doctor` checks), not a system account or the first user (below {TRAINER_UID_MIN}),"
        f" not nobody ({NOBODY_UID}).",
    )
    checkpoint_keep: int = _hyperparameter("checkpoint_keep")

    @field_validator("uid")
    @classmethod
    def _not_nobody(cls, value: int) -> int:
        if value == NOBODY_UID:
            raise ValueError(
                f"{value} is nobody, whom the export maps every node's root to; use the default 10001"
            )
        return value

    @field_validator(
        "epochs",
        "steps",
        "batch_size",
        "learning_rate",
        "seed",
        "target_accuracy",
        "checkpoint_keep",
        mode="before",
    )
    @classmethod
    def _not_boolean(cls, value: Any) -> Any:
        # The number types would read `true` as 1.
        if isinstance(value, bool):
            raise ValueError(f"{str(value).lower()} is not a number")
        return value

    @model_validator(mode="after")
    def _one_budget(self) -> Trainer:
        if self.epochs is not None and self.steps is not None:
            raise ValueError(
                f"epochs ({self.epochs}) and steps ({self.steps}) both set how long to train: keep one"
            )
        return self


# Sweep parameter names (camelCase, as in the stack file) and the trainer flag each one sets.
SWEEP_PARAMETERS = {
    "learningRate": "lr",
    "batchSize": "batch_size",
    "epochs": "epochs",
    "weightDecay": "weight_decay",
    "momentum": "momentum",
    "labelSmoothing": "label_smoothing",
    "model": "model",
}


class Range(KeyModel):
    """A continuous range for random search."""

    min: float
    max: float
    log: bool = Field(default=False, description="Sample uniformly in log space.")


class Sweep(KeyModel):
    """A hyperparameter search run as an Indexed Job, one set per completion index."""

    strategy: SweepStrategy = Field(default=SweepStrategy.GRID, description="`grid` or `random`.")
    samples: int | None = Field(default=None, ge=1, le=1000, description="Sets to draw (random).")
    seed: int = Field(default=0, ge=0, description="Seed of the random draw.")
    parallelism: int | None = Field(
        default=None, ge=1, description="Sets run at once; default and maximum: the lab's GPUs."
    )
    parameters: dict[str, list[float | int | str] | Range] = Field(
        description="Parameter name to a list of values (grid, random) or a range (random)."
    )

    @field_validator("parameters", mode="before")
    @classmethod
    def _no_booleans(cls, value: Any) -> Any:
        # Before the model's number types read `true` as 1.
        for name, values in value.items() if isinstance(value, dict) else ():
            for i, item in enumerate(values if isinstance(values, list) else ()):
                if isinstance(item, bool):
                    raise ValueError(
                        f"{name}: item {i + 1} is {str(item).lower()}; give a value of its range"
                    )
        return value

    @field_validator("parameters")
    @classmethod
    def _known(cls, value: dict[str, Any]) -> dict[str, Any]:
        if not value:
            raise ValueError("is empty; name at least one parameter, e.g. learningRate: [0.1, 0.2]")
        for name, values in value.items():
            if name not in SWEEP_PARAMETERS:
                raise ValueError(f"unknown parameter {name!r}; choose from {', '.join(SWEEP_PARAMETERS)}")
            if isinstance(values, list) and not values:
                raise ValueError(f"{name} has no values; give at least one")
            if isinstance(values, Range) and not values.min < values.max:
                raise ValueError(f"{name}: min must be below max")
            if isinstance(values, Range) and values.log and values.min <= 0:
                raise ValueError(f"{name}: a log range needs min > 0")
        return value

    def space(self) -> dict[str, Any]:
        """The search space in the trainer's sweep-file format (snake_case trainer flags), values
        as the trainer reads them (a `1e-3` the YAML file leaves as text becomes a number)."""
        params = {
            SWEEP_PARAMETERS[name]: v.model_dump()
            if isinstance(v, Range)
            else [check_hyperparameter(SWEEP_PARAMETERS[name], item) for item in v]
            for name, v in self.parameters.items()
        }
        return {
            "strategy": self.strategy.value,
            "samples": self.samples,
            "seed": self.seed,
            "parameters": params,
        }

    def size(self) -> int:
        """How many hyperparameter sets the space holds, counted by the trainer's own expansion."""
        return trainer_sweep.count(self.space())


class GangScheduler(StrEnum):
    KUEUE = "kueue"  # all-or-nothing admission of the training run and the sweep
    NONE = "none"


class Scheduling(KeyModel):
    """How the training run and the sweep get their GPUs."""

    gang: GangScheduler | None = Field(
        default=None,
        description="`kueue` (installed by the lab unless `provides.kueue`; the default on Kubernetes"
        " 1.29 and later) or `none` (the default before 1.29): see docs/scaling.md.",
    )


class Observability(KeyModel):
    """Prometheus, Grafana and the exporters that watch the lab train (docs/observability.md)."""

    enabled: bool = Field(default=True, description="Install the monitoring stack; `false` leaves it out.")
    metrics_port: int = Field(
        default=9464,
        ge=1024,
        # Below the ephemeral range the ranks' collectives use (EPHEMERAL_PORTS).
        le=EPHEMERAL_PORTS[0] - 1,
        description="Port each rank serves its Prometheus metrics on, plus its rank within the pod;"
        " none of those ports the rendezvous port, one the cluster uses (kubelet, API server, etcd,"
        " NFS, registry, node exporter) or an ephemeral one.",
    )
    node_exporter_port: int = Field(
        default=NODE_EXPORTER_PORT,
        ge=1024,
        le=EPHEMERAL_PORTS[0] - 1,
        description="Port the lab's node exporter takes on every node (its host network). Set another"
        " where a node already runs an exporter on the default (`labctl doctor` names what holds it);"
        " Prometheus' scrape follows. Not a TCP port the nodes hold (the cluster's programs', SSH's,"
        " the lab's other ports) nor a NodePort.",
    )

    @model_validator(mode="after")
    def _ports_differ(self) -> Observability:
        if self.node_exporter_port == self.metrics_port:
            raise ValueError(
                f"nodeExporterPort {self.node_exporter_port} is also metricsPort: on a node that runs ranks"
                " on the host network both would listen there; choose another, such as 9101"
            )
        return self
