"""What a run trains, behind one interface (base.py's Trained): the tensors, their optimizer groups,
the file they are saved as, the change they make to a MODEL; adapters.py is the adapters' (LoRA, DoRA,
LoKr, ... and the text encoder's), weights.py a model's own weights (full fine-tuning)."""

from ..adapters.attach import FULL, AdapterSpec
from .adapters import TrainedAdapters, trained_adapters
from .base import Trained, TrainedBuilder, TrainedSetup
from .weights import TrainedWeights, check_weights_trainable, trained_weights


def trained_for(spec: AdapterSpec) -> TrainedBuilder:
    """What a run of AdapterSpec `spec` trains: the model's own weights for algorithm full, else adapters."""
    return trained_weights if spec.algorithm == FULL else trained_adapters


__all__ = [
    "Trained",
    "TrainedAdapters",
    "TrainedBuilder",
    "TrainedSetup",
    "TrainedWeights",
    "check_weights_trainable",
    "trained_adapters",
    "trained_for",
    "trained_weights",
]
