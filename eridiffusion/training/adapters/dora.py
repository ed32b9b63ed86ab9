"""DoRA: LoRA plus a learned magnitude per input column, in the form ComfyUI applies.

ComfyUI (0.3.75 and newer) applies a `dora_scale` of shape (1, in, …) as
    W' = (W + ΔW) · dora_scale / ‖W + ΔW‖,  the norm taken over the output axis per input column,
and strength s as W + s·(W' − W). (A `dora_scale` on the output axis is applied differently by
different ComfyUI versions, so this module always saves the input-axis form: the round-trip
test holds on both.) Since W' only rescales input columns, W'·x = (W + ΔW)·(x ⊙ r) with
r = dora_scale / ‖W + ΔW‖, so the layer still runs in bypass form. ‖W + ΔW‖² is computed from
‖W‖², the cross term Wᵀ·up and (up·down)'s Gram form — ΔW itself is never built.
"""

import torch

from .base import Adapter, seeded


def _column_sq_norms(matrix, in_channels):
    """Σ over output rows and kernel taps of matrix², per input channel; matrix is (out, in·k)."""
    return matrix.square().reshape(matrix.shape[0], in_channels, -1).sum(dim=(0, 2))


class DoRA(Adapter):
    algorithm = "dora"

    def __init__(self, layer, rank, alpha, seed=0):
        super().__init__()
        from lycoris.modules.locon import LoConModule  # LyCORIS (and bitsandbytes) load when an adapter is made

        with seeded(seed):
            self.lycoris = LoConModule("", layer, lora_dim=rank, alpha=alpha)
        self.layer = [layer]  # a list: the frozen layer is read, never registered or trained
        self.is_conv = not isinstance(layer, torch.nn.Linear)
        self.in_channels = layer.weight.shape[1]
        with torch.no_grad():
            norms = _column_sq_norms(layer.weight.detach().float().flatten(1), self.in_channels).sqrt()
        shape = (1, self.in_channels) + (1,) * (layer.weight.dim() - 2)
        self.magnitude = torch.nn.Parameter(norms.reshape(shape).to(layer.weight.device))
        # ((weight storage, device), ‖W‖² per column): W is frozen, so computed once
        self._base_sq: tuple[tuple[int, torch.device] | None, torch.Tensor | None] = (None, None)

    def _base_column_sq_norms(self, weight):
        key, value = self._base_sq
        if key != (weight.data_ptr(), weight.device):
            with torch.no_grad():
                value = _column_sq_norms(weight.float(), self.in_channels)
            self._base_sq = ((weight.data_ptr(), weight.device), value)
        return value

    def column_norms(self):
        """‖W + ΔW‖ per input column, without building ΔW."""
        weight = self.layer[0].weight.detach().flatten(1)
        up = self.lycoris.lora_up.weight.flatten(1).float()  # (out, r)
        down = self.lycoris.lora_down.weight.flatten(1).float()  # (r, in·k)
        scale = self.lycoris.scale
        r = down.shape[0]
        base_sq = self._base_column_sq_norms(weight)
        up_t_w = (up.t().to(weight.dtype) @ weight).float()  # (r, in·k)
        cross = (down * up_t_w).reshape(r, self.in_channels, -1).sum(dim=(0, 2))
        gram = up.t() @ up  # (r, r)
        delta_sq = ((gram @ down) * down).reshape(r, self.in_channels, -1).sum(dim=(0, 2))
        squared = base_sq + 2 * scale * cross + scale * scale * delta_sq
        # ComfyUI 0.3.75 adds the weight dtype's eps to the norm; keep that for an exact match.
        return squared.clamp_min(0).sqrt() + torch.finfo(weight.dtype).eps

    def forward(self, x, base):
        if self.multiplier == 0:
            return base(x)
        ratio = self.magnitude.flatten() / self.column_norms()
        shape = (1, -1) + (1,) * (x.dim() - 2) if self.is_conv else (-1,)
        scaled = x * ratio.reshape(shape).to(x.dtype)
        adapted = base(scaled) + self.lycoris.bypass_forward_diff(scaled, scale=1.0)
        if self.multiplier == 1.0:
            return adapted
        plain = base(x)
        return plain + self.multiplier * (adapted - plain)

    def comfy_tensors(self):
        tensors = {name: t.detach() for name, t in self.lycoris.custom_state_dict().items()}
        tensors["dora_scale"] = self.magnitude.detach()
        return tensors

    def tensor_targets(self):
        return {
            "lora_up.weight": self.lycoris.lora_up.weight,
            "lora_down.weight": self.lycoris.lora_down.weight,
            "alpha": self.lycoris.alpha,
            "dora_scale": self.magnitude,
        }
