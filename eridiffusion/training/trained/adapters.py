"""The adapters a run trains (trained/base.py's first Trained): AdapterSpec's algorithm on the layers
it targets, fresh or set to a resume file's values, and the text encoder's when it trains too; saved
as a LoRA file (formats/lora_file.py's export_lora)."""

import contextlib
import logging
from typing import Any

import torch

from ...errors import EriDiffusionError
from ...formats.lora_file import TrainedLoRA, export_lora, loadable_weight_keys
from ..adapters import ALGORITHMS, AdapterSet, attach_adapters, narrow_layers, warn_narrow_layers
from ..adapters.from_tensors import adapters_from_tensors
from ..adapters.layer_selection import block_multipliers
from ..model.text_encoder import TextEncoderTraining
from .base import Trained, TrainedSetup


class TrainedAdapters(Trained):
    """`adapters` on the diffusion model's layers (`prefixes`: {weight key: file prefix}), and the
    text encoder's (`text_encoder`, or None)."""

    def __init__(
        self, adapters: AdapterSet, prefixes: dict[str, str], text_encoder: TextEncoderTraining | None = None
    ) -> None:
        self.adapters, self.prefixes, self.text_encoder = adapters, prefixes, text_encoder
        # every trained tensor, listed once: walking the ~2,000 adapter modules each step took 0.044 s
        # of an eager SDXL step (cProfile, H100)
        self.listed = list(adapters.parameters())
        if text_encoder is not None:
            self.listed += list(text_encoder.adapters.parameters())

    def parameters(self) -> list[torch.nn.Parameter]:
        return self.listed

    def parameter_groups(self, learning_rate: float, block_lr: str, text_encoder_lr: float) -> list[dict[str, Any]]:
        """One group per block_lr multiplier, in order of first appearance, then the text encoder's."""
        multipliers = block_multipliers(self.adapters.layer_names, block_lr) if block_lr.strip() else {}
        by_multiplier: dict[float, list[torch.nn.Parameter]] = {}
        for layer, adapter in self.adapters.items():
            by_multiplier.setdefault(multipliers.get(layer, 1.0), []).extend(adapter.parameters())
        groups: list[dict[str, Any]] = [{"params": p, "lr": learning_rate * m} for m, p in by_multiplier.items()]
        if self.text_encoder is not None:
            groups.append({"params": list(self.text_encoder.adapters.parameters()), "lr": text_encoder_lr})
        return groups

    def file_content(self, metadata: dict[str, str]) -> TrainedLoRA:
        encoder = self.text_encoder
        text_encoder = (encoder.adapters, encoder.prefixes) if encoder is not None else None
        return export_lora(self.adapters, self.prefixes, metadata, text_encoder=text_encoder)

    def apply_to(self, patcher: Any) -> None:
        self.adapters.attach_to(patcher)

    def result_clip(self) -> Any:
        return self.text_encoder.result_clip() if self.text_encoder is not None else None

    def bypassed(self) -> contextlib.AbstractContextManager[None]:
        return self.adapters.bypassed()

    def requires_grad_(self, requires_grad: bool) -> None:
        self.adapters.requires_grad_(requires_grad)
        if self.text_encoder is not None:
            self.text_encoder.adapters.requires_grad_(requires_grad)

    def model_part(self) -> torch.nn.Module:
        return self.adapters

    def adapter_set(self) -> AdapterSet | None:
        return self.adapters


def trained_adapters(setup: TrainedSetup) -> TrainedAdapters:
    """The adapters of `setup.spec` on its clone, fresh (seeded) or set to the resume file's values,
    and the text encoder's when it trains; one warning for layers narrower than the rank."""
    patcher, spec, saved = setup.patcher, setup.spec, setup.saved
    prefixes = loadable_weight_keys(patcher.model)
    used: set[str] = set()
    if not spec.train_diffusion_model:  # the text encoders alone train
        adapters = AdapterSet(spec, {}).to(patcher.load_device)
    elif saved is None:
        adapters = attach_adapters(patcher, spec, prefixes.keys(), seed=setup.seed)
    else:
        adapters, used = adapters_from_tensors(patcher.model, saved, spec, prefixes, setup.saved_path)
        adapters.to(patcher.load_device).attach_to(patcher)
    text_encoder = None
    if setup.clip is not None:
        text_encoder = TextEncoderTraining(
            setup.clip, spec, setup.seed, saved, setup.saved_path, encodings_on_device=setup.encodings_on_device
        )
    narrow = narrow_layers(adapters, patcher.model)
    if text_encoder is not None:
        narrow += narrow_layers(text_encoder.adapters, text_encoder.clip.patcher.model)
    warn_narrow_layers(spec, narrow)
    note = ALGORITHMS[spec.algorithm].stock_loader_note
    if note:
        logging.warning(note)
    if saved is not None:
        unused = sorted(set(saved) - used - (text_encoder.used_keys if text_encoder else set()))
        if unused:
            raise EriDiffusionError(
                f"{setup.saved_path} has weights this run would drop (e.g. {unused[0]}): "
                "text-encoder weights need a CLIP and text_encoder_lr > 0; others belong "
                "to another model."
            )
    return TrainedAdapters(adapters, prefixes, text_encoder)
