"""Frozen weights autograd can run through (training/model/autograd_weights.py), whatever mode ComfyUI made
and moved them in."""

import comfy.model_patcher
import torch

from eridiffusion.training.model.autograd_weights import frozen_weights_injection


def loaded_like_comfyui(moved_outside_inference_mode):
    """A linear layer's patcher whose parameters were made under inference mode (as ComfyUI loads
    models inside a node), then optionally given new data outside it (as `Module.to` does when an
    earlier run moved the model between devices)."""
    with torch.inference_mode():
        layer = torch.nn.Linear(4, 3).requires_grad_(False)  # ComfyUI's weights are frozen
    if moved_outside_inference_mode:
        for param in layer.parameters():
            param.data = param.data.clone()
    return comfy.model_patcher.ModelPatcher(layer, torch.device("cpu"), torch.device("cpu"))


def test_parameters_moved_outside_inference_mode_still_lack_a_version_counter():
    """What the injection has to handle: such a weight passes for a normal tensor but breaks autograd."""
    layer = loaded_like_comfyui(True).model
    assert not layer.weight.is_inference()
    x = torch.randn(2, 4, requires_grad=True)
    try:
        layer(x)
        raised = None
    except RuntimeError as error:
        raised = str(error)
    assert raised is not None and "version counter" in raised


def test_the_injection_lets_autograd_through_weights_made_or_moved_under_inference_mode():
    for moved in (False, True):
        patcher = loaded_like_comfyui(moved)
        frozen_weights_injection(patcher)
        originals = dict(patcher.model.named_parameters())
        patcher.inject_model()
        try:
            x = torch.randn(2, 4, requires_grad=True)
            patcher.model(x).sum().backward()
            assert x.grad is not None and torch.equal(x.grad, originals["weight"].sum(0).expand(2, 4))
            assert all(p.data_ptr() == originals[n].data_ptr() for n, p in patcher.model.named_parameters())
        finally:
            patcher.eject_model()
        assert all(p is originals[n] for n, p in patcher.model.named_parameters())  # the originals are back
