"""Adapters attached through ComfyUI's injections: each algorithm's bypass equals what ComfyUI
builds from the saved file, at full and half strength, with and without conv layers."""

import logging

import comfy.model_management
import comfy.sd
import comfy.utils
import pytest
import torch

from devkit.stock_comfyui import merging_in_fp32
from devkit.tiny_models import build_tiny
from eridiffusion.errors import EriDiffusionError
from eridiffusion.formats.lora_file import export_lora, loadable_weight_keys
from eridiffusion.training.adapters import ALGORITHMS, AdapterSpec, attach_adapters
from eridiffusion.training.adapters.attach import _BypassForward
from eridiffusion.training.adapters.lora import LoRA


@pytest.fixture(scope="module")
def sd15():
    return build_tiny("sd15")[0]


def probe_output(patcher):
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(1, 4, 16, 16, generator=generator)
    context = torch.randn(1, 77, 32, generator=generator)
    device = patcher.load_device
    with torch.inference_mode():
        comfy.model_management.load_models_gpu([patcher])
        return (
            patcher.model.apply_model(x.to(device), torch.tensor([3.0], device=device), c_crossattn=context.to(device))
            .cpu()
            .clone()
        )


def test_lora_term_equals_its_delta_weight_applied_to_the_input():
    layer = torch.nn.Linear(24, 12)
    lora = LoRA(layer, rank=4, alpha=2.0)
    with torch.no_grad():
        lora.lycoris.lora_up.weight.normal_()
    x = torch.randn(5, 24)
    torch.testing.assert_close(lora(x, layer) - layer(x), x @ lora.delta_weight().T, rtol=1e-5, atol=1e-5)
    assert lora.scale == 0.5


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_fresh_adapter_leaves_the_layer_output_unchanged(algorithm):
    layer = torch.nn.Linear(32, 16)
    adapter = AdapterSpec(algorithm=algorithm, rank=4, alpha=4.0).build(layer, seed=0)
    x = torch.randn(3, 32)
    torch.testing.assert_close(adapter(x, layer), layer(x), rtol=1e-5, atol=1e-6)
    adapter(x, layer).square().sum().backward()  # and it can learn: a gradient reaches its parameters
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in adapter.parameters())


def test_boft_at_a_rank_that_cannot_split_the_layer_names_the_ranks_that_can():
    layer = torch.nn.Linear(32, 320)  # SD's narrowest width: no butterfly split at rank 8
    with pytest.raises(EriDiffusionError, match=r"320 wide .* rank 8; ranks that split it: .*\b10\b.*or algorithm oft"):
        AdapterSpec(algorithm="boft", rank=8).build(layer, seed=0)


def test_oft_layers_do_not_log_a_line_each():
    import lycoris.logging  # noqa: F401  (its logger, which does not propagate to the root one)

    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("LyCORIS")
    logger.addHandler(handler)
    try:
        for algorithm in ("oft", "boft"):
            AdapterSpec(algorithm=algorithm, rank=4).build(torch.nn.Linear(32, 64), seed=0)
        logger.info("still heard")  # the handler hears LyCORIS's INFO lines outside the build
    finally:
        logger.removeHandler(handler)
    assert [r.getMessage() for r in records] == ["still heard"]


def perturbed_file_reproduces(sd15, spec, path, caplog):
    """Attach `spec`'s adapters to a clone of `sd15`, move every parameter off its initial value (as if
    trained), save them to `path`, and check stock ComfyUI's loading of the file reproduces the clone's
    output at strengths 1 and 0.5 with no unmatched key. Returns (adapters, clone)."""
    prefixes = loadable_weight_keys(sd15.model)
    clone = sd15.clone()
    adapters = attach_adapters(clone, spec, prefixes.keys(), seed=1)
    with torch.no_grad():
        for p in adapters.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())).to(p.device) * 0.05)
    export_lora(adapters, prefixes, {}).save(path, dtype="fp32")
    for strength in (1.0, 0.5):
        adapters.set_multiplier(strength)
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            patched, _ = comfy.sd.load_lora_for_models(sd15, None, comfy.utils.load_torch_file(path), strength, 0)
        assert not [r for r in caplog.records if "lora key not loaded" in r.getMessage()]
        with merging_in_fp32(sd15.load_device):  # (on a GPU stock ComfyUI merges in fp16 otherwise)
            ours, theirs = probe_output(clone), probe_output(patched)
        assert ((ours - theirs).norm() / theirs.norm()).item() < 1e-4, (spec.algorithm, spec.conv_rank, strength)
    return adapters, clone


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
@pytest.mark.parametrize("conv_rank", [0, 4])
def test_saved_file_reproduces_the_bypass_model_in_stock_comfyui(algorithm, conv_rank, sd15, tmp_path, caplog):
    spec = AdapterSpec(
        algorithm=algorithm, rank=4, alpha=2.0, targets="all-linear", conv_rank=conv_rank, conv_alpha=2.0
    )
    adapters, _ = perturbed_file_reproduces(sd15, spec, str(tmp_path / "a.safetensors"), caplog)
    convs = [n for n in adapters.layer_names if ".in_layers." in n or ".out_layers." in n]
    assert bool(convs) == (conv_rank > 0)


@pytest.mark.parametrize("algorithm", ["lora", "oft"])
def test_norms_and_biases_trained_as_differences_load_in_stock_comfyui_and_reproduce(algorithm, sd15, tmp_path, caplog):
    spec = AdapterSpec(algorithm=algorithm, rank=4, alpha=2.0, targets="all-linear", train_norms_and_biases=True)
    path = str(tmp_path / "n.safetensors")
    adapters, clone = perturbed_file_reproduces(sd15, spec, path, caplog)
    norms = [n for n, a in adapters.items() if a.algorithm == "norm"]
    assert any(".norm" in n for n in norms) and any("in_layers.0" in n for n in norms)  # LayerNorm and GroupNorm
    assert sum(a.bias_diff is not None for _, a in adapters.items()) > 0
    keys = comfy.utils.load_torch_file(path).keys()
    assert any(k.endswith(".diff") for k in keys) and any(k.endswith(".diff_b") for k in keys)
    adapters.set_multiplier(1.0)
    base = probe_output(sd15)
    assert ((probe_output(clone) - base).norm() / base.norm()).item() > 1e-3  # the differences count
    adapters.set_multiplier(0.0)
    assert torch.equal(probe_output(clone), probe_output(sd15))


def test_lokr_full_rank_keeps_both_kronecker_factors_whole(sd15):
    spec = AdapterSpec(algorithm="lokr", rank=4, alpha=4.0, targets="attention", lokr_full_rank=True)
    adapters = attach_adapters(sd15.clone(), spec, loadable_weight_keys(sd15.model).keys())
    names = {k for _, a in adapters.items() for k in a.comfy_tensors()}
    assert names == {"lokr_w1", "lokr_w2", "alpha"}


def test_attention_preset_targets_only_attention_projections():
    model, _, _ = build_tiny("sdxl")
    adapters = attach_adapters(
        model.clone(), AdapterSpec(rank=2, alpha=2, targets="attention"), loadable_weight_keys(model.model)
    )
    suffixes = {n[n.rindex(".to_") + 1 :] for n in adapters.layer_names}
    assert suffixes == {"to_q", "to_k", "to_v", "to_out.0"}
    assert all(".to_" in n for n in adapters.layer_names)


def test_injection_is_active_only_while_the_clone_is_loaded(sd15):
    clone = sd15.clone()
    adapters = attach_adapters(
        clone, AdapterSpec(rank=2, alpha=2, targets="all-linear"), loadable_weight_keys(sd15.model)
    )
    layer = dict(sd15.model.named_modules())[adapters.layer_names[0]]
    assert "forward" not in layer.__dict__
    with torch.inference_mode():
        comfy.model_management.load_models_gpu([clone])
        assert isinstance(layer.__dict__["forward"], _BypassForward)
        comfy.model_management.load_models_gpu([sd15])  # the other branch of the graph
    assert "forward" not in layer.__dict__
    assert sd15.injections == {}
