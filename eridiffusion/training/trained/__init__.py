"""What a run trains, behind one interface (base.py's Trained): the tensors, their optimizer groups,
the file they are saved as, the change they make to a MODEL; adapters.py is the adapters' (LoRA, DoRA,
LoKr, ... and the text encoder's), weights.py a model's own weights (full fine-tuning)."""

from .adapters import TrainedAdapters, trained_adapters
from .base import Trained, TrainedBuilder, TrainedSetup
from .weights import TrainedWeights, trained_weights

__all__ = [
    "Trained",
    "TrainedAdapters",
    "TrainedBuilder",
    "TrainedSetup",
    "TrainedWeights",
    "trained_adapters",
    "trained_weights",
]
