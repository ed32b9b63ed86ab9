"""What a run trains is one interface (training/trained/base.py's Trained), which the loop, resume,
checkpoints, the EMA and the optimizer use alone. A second kind, written here and plugged in through
RunRequest.trained: the whole weights of one transformer block's linear layers (every entry free, no
low rank), saved as ComfyUI's `diff` keys, which stock LoraLoader adds to the weights. It trains
through the unchanged loop, continues exactly from a checkpoint, and its file loads in stock ComfyUI."""

import contextlib
import dataclasses
import json

import comfy.patcher_extension
import pytest
import safetensors.torch
import torch

from devkit.repeats import no_further_than_a_repeat
from devkit.stock_comfyui import ProbeInput, load_with_stock_comfyui, merged_tolerance, relative_error
from eridiffusion.formats.lora_file import TrainedLoRA, loadable_weight_keys
from eridiffusion.training.adapters.attach import eject_adapter, inject_adapter
from eridiffusion.training.run.config import TrainConfig
from eridiffusion.training.run.preflight import preflight
from eridiffusion.training.run.request import RunRequest
from eridiffusion.training.run.resume import load_resume_point
from eridiffusion.training.run.trainer import train_run
from eridiffusion.training.trained import Trained, TrainedSetup

BLOCK = "diffusion_model.middle_block.1.transformer_blocks.0."  # the tiny SD1.5's middle transformer block


class WholeWeight(torch.nn.Module):
    """A linear layer's weight trained whole, as its difference ΔW from the frozen W (what ComfyUI's
    `diff` holds): the layer computes W·x + b + strength·ΔW·x. Training ΔW is training W + ΔW, every
    entry free; keeping the difference makes the saved file the parameter itself, so a resume is exact.
    It stands in the bypass injection (adapters/attach.py) as an adapter does: the MODEL's weights
    are never written."""

    def __init__(self, layer):
        super().__init__()
        self.diff = torch.nn.Parameter(torch.zeros(layer.weight.shape, dtype=torch.float32))
        self.multiplier = 1.0
        self.frozen_products = None  # (fp8 products are the adapters' speed path)

    def forward(self, x, base):
        if self.multiplier == 0:
            return base(x)
        return base(x) + self.multiplier * torch.nn.functional.linear(x, self.diff.to(x.dtype))


class BlockWeights(Trained):
    """The whole weights of BLOCK's linear layers: a TrainedBuilder (the class, called with a
    TrainedSetup), fresh at the frozen weights or set to a resume file's `diff`s."""

    def __init__(self, setup: TrainedSetup):
        model = setup.patcher.model
        self.prefixes = loadable_weight_keys(model)
        layers = [(n, m) for n, m in model.named_modules() if n.startswith(BLOCK) and isinstance(m, torch.nn.Linear)]
        self.names = [name for name, _ in layers]
        self.weights = torch.nn.ModuleList([WholeWeight(layer) for _, layer in layers])
        if setup.saved is not None:
            with torch.no_grad():
                for name, weight in self.items():
                    weight.diff.copy_(setup.saved[f"{self.prefixes[name + '.weight']}.diff"])
        self.weights.to(setup.patcher.load_device)
        self.listed = list(self.weights.parameters())
        self.spec = setup.spec  # (a resume reads the run's settings from the file's metadata)
        self.apply_to(setup.patcher)

    def items(self):
        return zip(self.names, self.weights)

    def parameters(self):
        return self.listed

    def parameter_groups(self, learning_rate, block_lr, text_encoder_lr):
        return [{"params": self.listed, "lr": learning_rate}]

    def file_content(self, metadata):
        tensors = {
            f"{self.prefixes[name + '.weight']}.diff": weight.diff.detach().to("cpu", torch.float32).clone()
            for name, weight in self.items()
        }
        spec = json.dumps(dataclasses.asdict(self.spec))
        return TrainedLoRA(tensors, {"eridiffusion_adapter_spec": spec, **metadata})

    def apply_to(self, patcher):
        modules = dict(patcher.model.named_modules())
        pairs = [(modules[name], weight) for name, weight in self.items()]

        def inject(model_patcher):
            for module, weight in pairs:
                inject_adapter(module, weight)

        def eject(model_patcher):
            for module, weight in pairs:
                eject_adapter(module, weight)

        patcher.set_injections(f"block_weights_{id(self)}", [comfy.patcher_extension.PatcherInjection(inject, eject)])

    def result_clip(self):
        return None

    @contextlib.contextmanager
    def bypassed(self):
        for weight in self.weights:
            weight.multiplier = 0.0
        try:
            yield
        finally:
            for weight in self.weights:
                weight.multiplier = 1.0

    def requires_grad_(self, requires_grad):
        self.weights.requires_grad_(requires_grad)

    def model_part(self):
        return self.weights


def config(**values):
    settings = dict(
        steps=6,
        learning_rate=1e-3,
        weight_decay=0.0,
        dtype="fp32",
        seed=5,
        log_every=1,
        save_every=3,
        validate_every=3,
        gradient_checkpointing=False,
        batch_size=2,
        run_name="weights",
    )
    return TrainConfig(**{**settings, **values})


def trained(stack, cfg, folder, resume=None):
    model, _, _, data = stack
    request = RunRequest(model, data, cfg, resume=resume, trained=BlockWeights)
    preflight(request)
    with torch.inference_mode(False):
        return train_run(request, str(folder))


def test_a_run_trains_the_block_s_whole_weights_and_leaves_the_model_alone(quality_stack, tmp_path):
    model, _, _, data = quality_stack
    probe = ProbeInput.of(model, data)
    before = probe.output(model)
    result = trained(quality_stack, config(steps=40, learning_rate=3e-3, save_every=0, validate_every=40), tmp_path)
    weights = result.trained
    assert isinstance(weights, BlockWeights) and len(weights.names) == 10
    # measured on the CPU: the held-out loss 1.2653 -> 1.1349 in 40 steps
    assert result.eval_loss_after < 0.95 * result.eval_loss_before, (result.eval_loss_before, result.eval_loss_after)
    assert sorted(result.lora.tensors) == sorted(f"{weights.prefixes[n + '.weight']}.diff" for n in weights.names)
    assert all(bool(t.abs().max() > 0) for t in result.lora.tensors.values())
    assert torch.equal(probe.output(model), before)  # the input MODEL computes as before


@pytest.mark.parametrize("ema_decay", [0.0, 0.9])
def test_three_steps_then_three_resumed_equal_six_straight_bit_for_bit(quality_stack, tmp_path, ema_decay):
    whole = trained(quality_stack, config(ema_decay=ema_decay), tmp_path / "whole")
    middle = load_resume_point(str(tmp_path / "whole" / "checkpoints" / "weights_step000003.safetensors"))
    assert middle.state is not None and middle.state["step"] == 3
    resumed = trained(quality_stack, config(ema_decay=ema_decay), tmp_path / "resumed", resume=middle)
    assert len(whole.losses) == 6
    pairs = [(resumed.lora, whole.lora)] + ([(resumed.lora.raw, whole.lora.raw)] if ema_decay else [])
    if not torch.cuda.is_available():  # bit for bit
        assert resumed.losses == whole.losses and resumed.validation == whole.validation
        assert resumed.eval_loss_after == whole.eval_loss_after
        for lora, other in pairs:
            assert lora.tensors.keys() == other.tensors.keys()
            assert [k for k in lora.tensors if not torch.equal(lora.tensors[k], other.tensors[k])] == []
        return
    # a GPU's backward sums in no fixed order: no further apart than the six steps straight run again
    again = trained(quality_stack, config(ema_decay=ema_decay), tmp_path / "again")
    assert [step for step, _ in resumed.validation] == [step for step, _ in whole.validation]
    no_further_than_a_repeat(
        resumed.losses + [loss for _, loss in resumed.validation] + [resumed.eval_loss_after],
        whole.losses + [loss for _, loss in whole.validation] + [whole.eval_loss_after],
        again.losses + [loss for _, loss in again.validation] + [again.eval_loss_after],
    )
    for (lora, other), repeat in zip(pairs, [again.lora] + ([again.lora.raw] if ema_decay else []), strict=True):
        no_further_than_a_repeat(lora.tensors, other.tensors, repeat.tensors)


def test_the_saved_diffs_load_in_stock_comfyui_and_give_the_trained_model_s_output(quality_stack, tmp_path, caplog):
    model, _, _, data = quality_stack
    result = trained(quality_stack, config(save_every=0), tmp_path)
    path = result.checkpoints[-1]
    assert set(safetensors.torch.load_file(path)) == set(result.lora.tensors)
    patched, unmatched = load_with_stock_comfyui(model, path, 1.0, caplog)
    assert unmatched == []
    probe = ProbeInput.of(model, data)
    trainer_output, stock_output = probe.output(result.patcher), probe.output(patched)
    assert relative_error(stock_output, trainer_output) < merged_tolerance(patched, on_the_cpu=1e-5)
    assert relative_error(probe.output(model), trainer_output) > 1e-4  # the trained change is there
