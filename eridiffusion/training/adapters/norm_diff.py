"""Norm layers and biases trained as plain differences, as ComfyUI 0.28's own trainer trains them
(its BiasDiff): a norm layer's weight and bias get `diff` and `diff_b`, an adapted linear or conv
layer's bias gets `diff_b`; stock LoraLoader adds each, times its strength, to the frozen tensor."""

import torch

from .base import Adapter

NORMS = (torch.nn.LayerNorm, torch.nn.GroupNorm, torch.nn.RMSNorm)


def is_norm(layer):
    """A norm layer with a learned scale (`weight`) that NormDiff can train."""
    return isinstance(layer, NORMS) and getattr(layer, "weight", None) is not None


class NormDiff(Adapter):
    """A norm layer computed with weight + strength·diff and bias + strength·diff_b."""

    algorithm = "norm"

    def __init__(self, layer):
        super().__init__()
        self.layer = [layer]  # not a submodule: the frozen layer stays the model's
        self.diff = torch.nn.Parameter(torch.zeros(layer.weight.shape, dtype=torch.float32))
        bias = getattr(layer, "bias", None)
        self.diff_b = None if bias is None else torch.nn.Parameter(torch.zeros(bias.shape, dtype=torch.float32))

    @property
    def frozen_products(self):  # fp8 products are for matrix products, not norms
        return None

    @frozen_products.setter
    def frozen_products(self, value):
        pass

    def forward(self, x, base):
        if self.multiplier == 0:
            return base(x)
        layer, s = self.layer[0], self.multiplier
        weight = layer.weight.to(x.device, x.dtype) + s * self.diff.to(x.dtype)
        bias = None
        if self.diff_b is not None:
            bias = layer.bias.to(x.device, x.dtype) + s * self.diff_b.to(x.dtype)
        if isinstance(layer, torch.nn.GroupNorm):
            return torch.nn.functional.group_norm(x, layer.num_groups, weight, bias, layer.eps)
        if isinstance(layer, torch.nn.LayerNorm):
            return torch.nn.functional.layer_norm(x, layer.normalized_shape, weight, bias, layer.eps)
        return torch.nn.functional.rms_norm(x, layer.normalized_shape, weight, layer.eps)

    def comfy_tensors(self):
        return {name: t.detach() for name, t in self.tensor_targets().items()}

    def tensor_targets(self):
        targets = {"diff": self.diff}
        if self.diff_b is not None:
            targets["diff_b"] = self.diff_b
        return targets
