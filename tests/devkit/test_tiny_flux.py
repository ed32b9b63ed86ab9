"""The tiny stacks on ComfyUI's Flux DiT embed guidance as the real models do: FLUX.1 [dev] (and
Kontext, which loads as it) and FLUX.2 [dev] do, FLUX.1 [schnell] does not. (Their classes, latents and
forward: tests/devkit/test_tiny_models.py.)"""

import pytest
import torch


@pytest.mark.parametrize(
    "name, guidance_embed", [("flux_dev", True), ("flux_kontext", True), ("flux_schnell", False), ("flux2", True)]
)
def test_guidance_embedding_as_the_real_model_has_it(name, guidance_embed, stack_of):
    model, _, _ = stack_of(name)
    dit = model.model.diffusion_model
    assert dit.params.guidance_embed is guidance_embed
    assert isinstance(dit.guidance_in, torch.nn.Identity) is not guidance_embed
