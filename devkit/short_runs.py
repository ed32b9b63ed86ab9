"""The short fp32 training run the GPU-only tests compare one setting against another with."""

from eridiffusion.training.adapters import AdapterSpec
from eridiffusion.training.run.config import TrainConfig


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


def encoding_changes(clip, eager, replayed, text="a photo of a dog"):
    """(how far the eager run's training moved `clip`'s encoding of `text`, how far the replayed run's
    encoding lies from the eager run's), as max absolute differences; `eager` and `replayed` are
    TrainResults of runs that trained the text encoder."""
    import torch

    tokens = clip.tokenize(text)
    with torch.no_grad():
        before = clip.encode_from_tokens(tokens)
        eager_encoding, replayed_encoding = (run.clip.encode_from_tokens(tokens) for run in (eager, replayed))
    return (eager_encoding - before).abs().max(), (replayed_encoding - eager_encoding).abs().max()


def family_run(run_name, steps, rank=8, **values):
    """The fp32 run the family tests train a tiny stack with: `steps` steps at 3e-3, every linear layer
    adapted at `rank`, without checkpointing; `values` override any setting."""
    settings = dict(
        steps=steps,
        learning_rate=3e-3,
        dtype="fp32",
        gradient_checkpointing=False,
        log_every=50,
        adapter=AdapterSpec(rank=rank, alpha=float(rank), targets="all-linear"),
        run_name=run_name,
    )
    return TrainConfig(**{**settings, **values})


def quick_samples(clip, vae, prompt, width, height, frames=1, steps=2, **inputs):
    """SampleDuringTraining's SAMPLE_CONFIG for one prompt: `steps` euler steps at cfg 1, rendered at the
    end of a run only; `inputs` are its other inputs (seconds, start_image, audio_vae)."""
    from eridiffusion.nodes.sampling_node import SampleDuringTraining

    values = dict(prompts=prompt, every=10_000, seed=0, steps=steps, cfg=1.0, sampler_name="euler")
    values.update(scheduler="simple", width=width, height=height, frames=frames, **inputs)
    return SampleDuringTraining.execute(clip, vae, **values).args[0]
