"""A live pooled output (the trained text encoder's, with a gradient) in the model's inputs: added on
its own device where the input holds it as it is (SDXL's `y`), else through the host's extra_conds."""

import pytest
import torch

from devkit.tiny_models import build_tiny
from eridiffusion.training.model.inputs import _extra_conds, model_inputs

PROMPT = "a photo of sks dog"


@pytest.fixture(scope="module")
def sdxl():
    model, clip, _ = build_tiny("sdxl", seed=0)
    with torch.inference_mode():
        conditioning = clip.encode_from_tokens_scheduled(clip.tokenize(PROMPT), show_pbar=False)
    return model.model, conditioning


def live(conditioning, seed):
    """The conditioning with a pooled output that requires grad (as the trained encoder's does)."""
    cond, options = conditioning[0]
    generator = torch.Generator().manual_seed(seed)
    pooled = torch.randn(options["pooled_output"].shape, generator=generator).requires_grad_(True)
    return [[cond.clone(), {**options, "pooled_output": pooled}]], pooled


def with_gradient(inputs, pooled):
    """(`inputs`, the pooled output's gradient of a fixed weighted sum of the inputs that depend on it)."""
    loss = sum(
        (c.cond.float() * torch.linspace(-1, 1, c.cond.numel()).reshape(c.cond.shape)).sum()
        for c in inputs.values()
        if isinstance(c.cond, torch.Tensor) and c.cond.requires_grad
    )
    (gradient,) = torch.autograd.grad(loss, pooled)
    return inputs, gradient


def inputs_and_gradient(base, conditioning, pooled, latent):
    """(the model's inputs, the pooled output's gradient of a loss on them)."""
    return with_gradient(model_inputs(base, conditioning, latent, "cpu", (64, 48)), pooled)


def hosts_inputs_and_gradient(base, conditioning, pooled, latent):
    """The same through the host's extra_conds with the live pooled output (what model_inputs did)."""
    cond, options = conditioning[0]
    conds = base.extra_conds(
        **options,
        cross_attn=cond,
        noise=latent[None],
        device="cpu",
        prompt_type="positive",
        width=64,
        height=48,
        latent_shapes=[latent[None].shape],
    )
    inputs = {name: c.process_cond(batch_size=1, area=None, device="cpu") for name, c in conds.items()}
    return with_gradient(inputs, pooled)


def test_sdxls_size_input_gets_the_live_pooled_output_added_with_the_hosts_values_and_gradient(sdxl):
    base, conditioning = sdxl
    latent = torch.randn(4, 6, 8)
    conditioning, pooled = live(conditioning, seed=1)
    _, added = _extra_conds(base, {**conditioning[0][1], "cross_attn": conditioning[0][0], "width": 64, "height": 48})
    assert list(added) == ["y"]  # SDXL's pooled output + image-size embeddings
    ours, ours_gradient = inputs_and_gradient(base, conditioning, pooled, latent)
    hosts, hosts_gradient = hosts_inputs_and_gradient(base, conditioning, pooled, latent)
    assert sorted(ours) == sorted(hosts)
    for name in hosts:
        torch.testing.assert_close(ours[name].cond, hosts[name].cond, rtol=0, atol=0)
    assert ours_gradient.abs().sum() > 0
    torch.testing.assert_close(ours_gradient, hosts_gradient, rtol=0, atol=0)


def test_a_model_that_transforms_its_pooled_output_gets_the_live_one_through_the_host(sdxl, monkeypatch):
    base, conditioning = sdxl
    encode_adm = base.encode_adm
    monkeypatch.setattr(base, "encode_adm", lambda **kw: encode_adm(**{**kw, "pooled_output": kw["pooled_output"] * 2}))
    latent = torch.randn(4, 6, 8)
    conditioning, pooled = live(conditioning, seed=2)
    _, added = _extra_conds(base, {**conditioning[0][1], "cross_attn": conditioning[0][0], "width": 64, "height": 48})
    assert added == {}
    ours, ours_gradient = inputs_and_gradient(base, conditioning, pooled, latent)
    hosts, hosts_gradient = hosts_inputs_and_gradient(base, conditioning, pooled, latent)
    torch.testing.assert_close(ours["y"].cond, hosts["y"].cond, rtol=0, atol=0)
    torch.testing.assert_close(ours_gradient, hosts_gradient, rtol=0, atol=0)


def test_a_cached_pooled_output_without_gradient_goes_through_the_host_once(sdxl, monkeypatch):
    base, conditioning = sdxl
    calls = []
    extra_conds = base.extra_conds
    monkeypatch.setattr(base, "extra_conds", lambda **kw: calls.append(1) or extra_conds(**kw))
    model_inputs(base, conditioning, torch.randn(4, 6, 8), "cpu")
    assert len(calls) == 1
