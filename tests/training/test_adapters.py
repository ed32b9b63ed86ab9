"""Bypass LoRA adapters attached through ComfyUI's injections."""
import torch

import comfy.model_management
from eridiffusion.demo.tiny_models import build_tiny
from eridiffusion.training.adapters import AdapterSpec, attach_adapters
from eridiffusion.training.adapters.attach import _BypassForward
from eridiffusion.training.adapters.lora import LoRAModule
from eridiffusion.training.lora_format import loadable_weight_keys


def test_lora_term_equals_its_delta_weight_applied_to_the_input():
    lora = LoRAModule(24, 12, rank=4, alpha=2.0, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        lora.up.normal_()
    x = torch.randn(5, 24)
    torch.testing.assert_close(lora(x), x @ lora.delta_weight().T, rtol=1e-5, atol=1e-5)
    assert lora.scale == 0.5


def test_fresh_adapters_leave_the_output_unchanged_and_start_trainable():
    lora = LoRAModule(8, 8, rank=2, alpha=2.0)
    assert torch.count_nonzero(lora(torch.randn(3, 8))) == 0
    assert lora.down.abs().sum() > 0 and all(p.requires_grad for p in lora.parameters())


def test_attention_preset_targets_only_attention_projections():
    model, _, _ = build_tiny("sdxl")
    adapters = attach_adapters(model.clone(), AdapterSpec(rank=2, alpha=2, targets="attention"),
                               loadable_weight_keys(model.model))
    suffixes = {name.rsplit(".", 2)[-2] + "." + name.rsplit(".", 1)[-1] if name.endswith(".0") else
                name.rsplit(".", 1)[-1] for name in adapters.layer_names}
    assert suffixes == {"to_q", "to_k", "to_v", "to_out.0"}


def test_injection_is_active_only_while_the_clone_is_loaded():
    model, _, _ = build_tiny("sd15")
    clone = model.clone()
    adapters = attach_adapters(clone, AdapterSpec(rank=2, alpha=2, targets="all-linear"),
                               loadable_weight_keys(model.model))
    name = adapters.layer_names[0]
    layer = dict(model.model.named_modules())[name]
    assert "forward" not in layer.__dict__
    with torch.inference_mode():
        comfy.model_management.load_models_gpu([clone])
        assert isinstance(layer.__dict__["forward"], _BypassForward)
        comfy.model_management.load_models_gpu([model])  # the other branch of the graph
    assert "forward" not in layer.__dict__
    assert model.injections == {}
