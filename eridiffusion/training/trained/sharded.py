"""A full fine-tune's trained weights split over the processes of a run (sharding fsdp, issue 47): each
layer's trained copy (weights.py's LayerCopy) is an FSDP2 unit of its own (torch.distributed.fsdp's
fully_shard over the processes' device group), so each process holds 1/N of the weights, of their
gradients (reduce-scattered, so averaged, as backward leaves each layer) and of the optimizer's state.
A layer's whole weight exists only while it computes: gathered (in the compute dtype) before its forward
and again before its backward, freed after.

The copies sit under one root module, and the diffusion model's forward runs inside the root's (an
injection on the training clone): FSDP's once-a-forward work (waiting for the optimizer's update, then
issuing each layer's gather as the host reaches it, ahead of the device) and the end of backward (the last
reduce-scatters waited for) happen once a forward, as FSDP expects of a root. Checkpoints: the whole model,
gathered tensor by tensor, written by rank 0 (weights.py's file); the optimizer's state written by every
process into a folder of shards (torch.distributed.checkpoint), which a run on another number of processes
reads resharded."""

import os
import shutil
from collections.abc import Callable
from typing import Any

import comfy.patcher_extension
import torch

from ...comfy_compat import load_leaving_out
from ...errors import EriDiffusionError
from ...formats.lora_file import loadable_weight_keys
from ..adapters import AdapterSet
from ..adapters.attach import target_layers
from ..adapters.layer_selection import PREFIX
from .base import TrainedSetup
from .weights import LayerCopy, TrainedWeights, set_copy_from

FSDP = "fsdp"
SHARDED_OPTIMIZERS = ("AdamW",)  # element-wise: a step over a shard is that step over its part of the tensor


class ShardedRoot(torch.nn.Module):
    """The FSDP root over the `copies` (an AdapterSet of LayerCopy units): a forward runs the diffusion
    model's, handed in as a function."""

    def __init__(self, copies: AdapterSet) -> None:
        super().__init__()
        self.copies = copies

    def forward(self, model_forward: Callable[[], Any]) -> Any:
        return model_forward()


class ShardedWeights(TrainedWeights):
    """TrainedWeights whose copies are FSDP2 units under `root`, split over the processes of `group`."""

    def __init__(self, root: ShardedRoot, base_model: Any, group: Any) -> None:
        super().__init__(root.copies, base_model)
        import torch.distributed as dist

        self.root, self.group = root, group
        self.is_main = dist.get_rank(group) == 0

    def file_content(self, metadata: dict[str, str]) -> Any:
        """Every process gathers each tensor in turn; rank 0 keeps them (on the CPU) and lays out the file,
        the others get its metadata alone (they write nothing)."""
        gathered = self._gathered(self.is_main, "cpu")
        return self.file_of(gathered if self.is_main else None, metadata)

    def apply_to(self, patcher: Any) -> None:
        """The whole copies, gathered by every process, as "set" patches on `patcher` (as TrainedWeights')."""
        gathered = self._gathered(True, patcher.offload_device)
        patcher.add_patches({PREFIX + name: ("set", (tensor,)) for name, tensor in gathered.items()}, 1.0)

    def _gathered(self, keep: bool, device: Any) -> dict[str, torch.Tensor]:
        """{name: whole trained tensor} on `device` where `keep`, else {}: each gathered by every process, one
        at a time (no process holds two whole tensors on its GPU)."""
        whole = {}
        with torch.no_grad():
            for name, tensor in self.named_tensors().items():
                full = tensor.detach().full_tensor()
                if keep:
                    whole[name] = full.to(device, copy=True)
        return whole

    def optimizer_state(self, optimizer: torch.optim.Optimizer, folder: str) -> dict[str, Any]:
        """Every process writes its shards of `optimizer`'s state into `folder` (torch.distributed.checkpoint),
        through a folder beside it that rank 0 renames once all are written; the state names the folder."""
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        partial = folder + ".partial"
        if self.is_main and os.path.exists(partial):  # (a run stopped while writing it)
            shutil.rmtree(partial)
        dist.barrier(group=self.group)
        dcp.save(get_optimizer_state_dict(self.root, optimizer), checkpoint_id=partial, process_group=self.group)
        if self.is_main:  # (dcp.save returns once every process's shards and rank 0's index are written)
            if os.path.exists(folder):
                shutil.rmtree(folder)
            os.replace(partial, folder)
        return {"shards": os.path.basename(folder)}

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, saved: dict[str, Any], folder: str) -> None:
        """`optimizer`'s state read from the shards in `folder` (the preflight found it), resharded to this
        run's processes."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

        state = get_optimizer_state_dict(self.root, optimizer)  # (its tensors laid out as this run shards them)
        dcp.load(state, checkpoint_id=folder, process_group=self.group)
        set_optimizer_state_dict(self.root, optimizer, state)


def sharded_weights(setup: TrainedSetup) -> ShardedWeights:
    """weights.py's trained_weights split over `setup.group`'s processes: each copy made whole (at the model's
    values or a resume file's) and sharded before the next is made, then the root over them, the copies'
    injection and the root's around the diffusion model's forward."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    patcher, spec = setup.patcher, setup.spec
    layers = target_layers(patcher.model, spec, loadable_weight_keys(patcher.model))
    mesh = DeviceMesh.from_group(setup.group, torch.device(patcher.load_device).type)
    gathered_in = setup.compute_dtype if setup.compute_dtype != setup.weights_dtype else None
    # gathered in the compute dtype, as the copies are cast to it anyway; gradients averaged in fp32
    policy = MixedPrecisionPolicy(param_dtype=gathered_in, reduce_dtype=torch.float32, cast_forward_inputs=False)
    with torch.inference_mode(False):  # ComfyUI runs nodes under inference mode; these must stay trainable
        copies = {}
        for name, layer in layers:
            copy = LayerCopy(layer, setup.weights_dtype)
            if setup.saved is not None:
                set_copy_from(copy, name, setup.saved, setup.saved_path)
            copies[name] = fully_shard(copy, mesh=mesh, mp_policy=policy)
        root = fully_shard(ShardedRoot(AdapterSet(spec, copies)), mesh=mesh, mp_policy=policy)
    trained = ShardedWeights(root, patcher.model, setup.group)
    root.copies.attach_to(patcher)
    if setup.originals_in_host_memory:  # (Flux.1-dev: 24 GB of bf16 weights no process computes with)
        load_leaving_out(patcher, [layer for _, layer in layers])
    _forward_inside(root, patcher)
    return trained


def _forward_inside(root: ShardedRoot, patcher: Any) -> None:
    """An injection on `patcher` that runs each forward of its diffusion model inside `root`'s."""
    model = patcher.model.diffusion_model
    before: list[Any] = []  # the forward in the model's own attributes when injected (None: its class's)

    def inject(model_patcher: Any) -> None:
        if before:  # (injected already)
            return
        before.append(model.__dict__.get("forward"))
        own = model.forward
        model.forward = lambda *args, **kwargs: root(lambda: own(*args, **kwargs))

    def eject(model_patcher: Any) -> None:
        if not before:
            return
        previous = before.pop()
        if previous is None:
            del model.forward
        else:
            model.forward = previous

    key = f"{root.copies.injection_key}_fsdp_root"
    patcher.set_injections(key, [comfy.patcher_extension.PatcherInjection(inject, eject)])


def check_sharding(config: Any, trains_weights: bool, processes: int) -> None:
    """What sharding fsdp cannot do (TrainConfig `config`): adapters, one process, and the settings it does not
    run with."""
    if config.precision.sharding != FSDP:
        return
    if not trains_weights:
        raise EriDiffusionError(
            f"sharding fsdp splits algorithm full's trained weights over the processes, and this run trains "
            f"adapters ({config.adapter.algorithm}), which every process holds whole (they are small): set sharding "
            "to none, or algorithm to full."
        )
    if processes < 2:
        raise EriDiffusionError(
            "sharding fsdp splits the trained weights over the processes of a run that torchrun starts "
            "(eridiffusion train --gpus N), and this run has one process: start it on 2 or more GPUs, or set "
            "sharding to none."
        )
    clashes = [
        (
            config.optimizer not in SHARDED_OPTIMIZERS,
            f"optimizer {config.optimizer}, which would step each shard as a whole tensor (Adafactor's row and "
            "column moments, Prodigy's one estimate, bitsandbytes' 8-bit blocks)",
            "optimizer AdamW",
        ),
        (config.cuda_graphs == "on", "cuda_graphs on (no graph replays the gathers FSDP issues from hooks)", "auto"),
        (config.torch_compile, "torch_compile (FSDP's hooks in compiled blocks are not tried yet)", "it off"),
        (config.precision.fine_tune_dtype != "fp32", "fine_tune_dtype bf16 (rounded whole)", "fine_tune_dtype fp32"),
        (config.ema_decay > 0, "ema_decay (the average is kept whole, not sharded)", "ema_decay 0"),
        (config.dtype == "fp16", "dtype fp16 (its loss scaler unscales whole gradients)", "dtype bf16"),
        (config.weights_vram_gib > 0, "weights_vram_gib (FSDP places the trained weights)", "weights_vram_gib 0"),
        (config.vram_budget_gib > 0 or config.blocks_to_swap > 0, "block swap", "vram_budget_gib, blocks_to_swap 0"),
    ]
    _refuse_clashes(clashes)


def check_sharded_inputs(config: Any, samples: bool, experts: bool) -> None:
    """What sharding fsdp cannot do with the run's inputs: `samples` (SampleDuringTraining renders), `experts`
    (two models trained)."""
    if config.precision.sharding != FSDP:
        return
    _refuse_clashes(
        [
            (samples, "samples during training (rank 0 renders alone)", "sample: null (and sample the saved model)"),
            (experts, "two experts (one sharded model a run)", "one model"),
        ]
    )


def _refuse_clashes(clashes: list[tuple[bool, str, str]]) -> None:
    """The error of the first (clash, what, fix) that clashes with sharding fsdp."""
    for clash, what, fix in clashes:
        if clash:
            raise EriDiffusionError(f"sharding fsdp does not run with {what}: set {fix}, or sharding to none.")
