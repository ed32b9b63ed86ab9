"""The short fp32 training run the GPU-only tests compare one setting against another with."""

from eridiffusion.training.adapters import AdapterSpec
from eridiffusion.training.config import TrainConfig


def short_run(cuda_graphs, run_name, **values):
    """4 fp32 steps at a high learning rate, logging every step, without checkpointing; `values`
    override any setting."""
    settings = dict(
        steps=4,
        learning_rate=3e-3,
        dtype="fp32",
        gradient_checkpointing=False,
        cuda_graphs=cuda_graphs,
        log_every=1,
        adapter=AdapterSpec(rank=4, alpha=4.0),
        run_name=run_name,
    )
    return TrainConfig(**{**settings, **values})
