"""A model that caches activations across calls trains right: HiDream-O1 keeps its text prefix's keys
and values, keyed by the prompt alone. On a patcher with adapters every forward computes them afresh,
with the adapters' current weights and gradients to them, and no other patcher of the same modules
reads what it computed."""

import comfy.model_management
import pytest
import torch

from devkit.tiny_models import build_tiny, family_params
from eridiffusion.training.adapters import AdapterSpec, attach_adapters
from eridiffusion.training.model.autograd_weights import frozen_weights_injection
from eridiffusion.training.model.forward import prediction, transformer_options_of
from eridiffusion.training.model.inputs import batch_inputs, model_inputs

PROMPT = "a photo of sks dog"


def adapted_stack():
    """(the input MODEL, a clone with LoRAs on every linear layer of its decoder, the adapters, one
    sample's inputs). (The vision tower only encodes reference images, none here.)"""
    model, clip, _ = build_tiny("hidream_o1", seed=0)
    patcher = frozen_weights_injection(model.clone())
    spec = AdapterSpec(rank=4, alpha=4.0, targets="all-linear", include="language_model")
    keys = [f"diffusion_model.{name}" for name, _ in model.model.diffusion_model.named_parameters()]
    adapters = attach_adapters(patcher, spec, keys, seed=0)
    image = torch.rand(3, 64, 64, generator=torch.Generator().manual_seed(1)) * 2 - 1
    conditioning = clip.encode_from_tokens_scheduled(clip.tokenize(PROMPT))
    inputs = batch_inputs([model_inputs(model.model, conditioning, image, "cpu", (64, 64))])
    return model, patcher, adapters, inputs


def moved(adapters, seed):
    """The adapters' weights moved, as an optimizer step moves them (LoRA's up matrices start at 0)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in adapters.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=generator).to(p.device))


X_T = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(2))  # a fixed noisy input
SIGMA = torch.tensor([0.6])


def on_device(patcher, inputs):
    """(x_t, sigma, inputs) on the device `patcher` computes on (the CPU here, the GPU on a GPU machine)."""
    device = patcher.load_device
    moved_inputs = {name: v.to(device) if isinstance(v, torch.Tensor) else v for name, v in inputs.items()}
    return X_T.to(device), SIGMA.to(device), moved_inputs


def forward(patcher, inputs):
    """A training forward of the loaded `patcher` (its wrappers included)."""
    x_t, sigma, inputs = on_device(patcher, inputs)
    return prediction(patcher.model, transformer_options_of(patcher), x_t, sigma, inputs)


def uncached_forward(patcher, inputs):
    """The same forward with the host's cache emptied first: the whole sequence computed."""
    patcher.model.diffusion_model.clear_kv_cache()
    return forward(patcher, inputs)


def probe_output(patcher, inputs, cleared=False):
    """`patcher` loaded and run without its wrappers, as a caller of apply_model runs it (stock_comfyui's
    probe); `cleared`: with the host's cache emptied first."""
    comfy.model_management.load_models_gpu([patcher], force_full_load=True)
    if cleared:
        patcher.model.diffusion_model.clear_kv_cache()
    x_t, sigma, inputs = on_device(patcher, inputs)
    return patcher.model.apply_model(x_t, sigma, **inputs)


@pytest.fixture(params=family_params(["hidream_o1"]))
def stack(request):
    return adapted_stack()


def test_a_forward_after_the_adapters_changed_computes_the_prompt_with_their_new_weights(stack):
    _, patcher, adapters, inputs = stack
    comfy.model_management.load_models_gpu([patcher], force_full_load=True)  # once, as the trainer does
    with torch.no_grad():
        moved(adapters, 3)
        first = forward(patcher, inputs)
        moved(adapters, 4)
        second = forward(patcher, inputs)
        fresh = uncached_forward(patcher, inputs)
    assert (second - first).abs().max() > 1e-2  # the change shows
    torch.testing.assert_close(second, fresh, rtol=1e-5, atol=1e-5)


def test_gradients_reach_the_adapters_of_the_prompt_as_in_an_uncached_forward(stack):
    _, patcher, adapters, inputs = stack
    comfy.model_management.load_models_gpu([patcher], force_full_load=True)
    moved(adapters, 3)
    params = list(adapters.parameters())
    with torch.no_grad():
        forward(patcher, inputs)  # a step before, with the same prompt
    cached = torch.autograd.grad(forward(patcher, inputs).square().sum(), params)
    fresh = torch.autograd.grad(uncached_forward(patcher, inputs).square().sum(), params)
    names = [name for name, adapter in adapters.items() for _ in adapter.parameters()]
    for name, got, want in zip(names, cached, fresh):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-7, msg=name)


def test_the_input_model_and_its_adapted_clone_read_nothing_the_other_computed(stack):
    model, patcher, adapters, inputs = stack
    moved(adapters, 3)
    with torch.no_grad():
        base = probe_output(model, inputs, cleared=True)
        adapted = probe_output(patcher, inputs)  # after the input model, with the same prompt
        base_again = probe_output(model, inputs)  # after its clone
        adapted_fresh = probe_output(patcher, inputs, cleared=True)
    assert torch.equal(adapted, adapted_fresh)
    assert torch.equal(base_again, base)


@pytest.mark.parametrize("name", family_params(["hidream_o1"]))
def test_prompts_of_different_token_lengths_in_one_batch_are_refused_by_name(name):
    from eridiffusion.errors import EriDiffusionError

    model, clip, _ = build_tiny(name, seed=0)
    image = torch.zeros(3, 64, 64)
    per_sample = [
        model_inputs(model.model, clip.encode_from_tokens_scheduled(clip.tokenize(prompt)), image, "cpu", (64, 64))
        for prompt in (PROMPT, PROMPT + " on a red sofa in the morning sun")
    ]
    with pytest.raises(EriDiffusionError, match="'input_ids' input different shapes.*batch_size to 1"):
        batch_inputs(per_sample)
    batched = batch_inputs([per_sample[0], per_sample[0]])  # the same length batches as ComfyUI does
    assert batched["input_ids"].shape[0] == 2
