"""What a run trains, behind one interface (base.py's Trained): the tensors, their optimizer groups,
the file they are saved as, the change they make to a MODEL; adapters.py is the adapters' (LoRA, DoRA,
LoKr, ... and the text encoder's), weights.py a model's own weights (full fine-tuning), sharded.py those
split over the processes of a run (sharding fsdp)."""

from ..adapters.attach import FULL, AdapterSpec
from .adapters import TrainedAdapters, trained_adapters
from .base import Trained, TrainedBuilder, TrainedSetup
from .sharded import FSDP, ShardedWeights, check_sharded_inputs, check_sharding, sharded_weights
from .weights import TrainedWeights, check_weights_trainable, trained_weights

WEIGHTS_BUILDERS = (trained_weights, sharded_weights)  # the builders of a model's own weights


def trained_for(spec: AdapterSpec, sharding: str = "none") -> TrainedBuilder:
    """What a run of AdapterSpec `spec` trains: the model's own weights for algorithm full (split over the
    processes with `sharding` fsdp), else adapters."""
    if spec.algorithm != FULL:
        return trained_adapters
    return sharded_weights if sharding == FSDP else trained_weights


__all__ = [
    "WEIGHTS_BUILDERS",
    "ShardedWeights",
    "Trained",
    "TrainedAdapters",
    "TrainedBuilder",
    "TrainedSetup",
    "TrainedWeights",
    "check_sharded_inputs",
    "check_sharding",
    "check_weights_trainable",
    "sharded_weights",
    "trained_adapters",
    "trained_for",
    "trained_weights",
]
