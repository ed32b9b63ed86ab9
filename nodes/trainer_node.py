"""LoRATrainer: MODEL + TRAINING_DATA + settings → trained MODEL, LORA, LOSS, sample grid."""
import os

import comfy.model_management
import folder_paths
import torch
from comfy.utils import ProgressBar
from comfy_api.latest import io

from ..training.adapters import TARGET_PRESETS, AdapterSpec
from ..training.config import DTYPES, LR_SCHEDULES, OPTIMIZERS, TrainConfig
from ..training.loss_plot import LossHistory
from ..training.trainer import TrainingHooks, train_lora, unique_run_dir
from .types import CATEGORY, LoRA, Loss, SampleConfig, TrainingData


class LoRATrainer(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="EriDiffusion_LoRATrainer",
            display_name="LoRATrainer",
            category=CATEGORY,
            description="Trains a LoRA on the MODEL and returns a copy of it with the LoRA applied.",
            inputs=[
                io.Model.Input("model", tooltip="The model to train on; it is not changed."),
                TrainingData.Input("training_data", tooltip="From CacheLatents."),
                io.Int.Input("steps", default=500, min=1, max=1000000, tooltip="Optimizer steps."),
                io.Float.Input("learning_rate", default=1e-4, min=1e-7, max=0.1, step=1e-6,
                               tooltip="Peak learning rate of the adapter."),
                io.Int.Input("rank", default=16, min=1, max=256, tooltip="LoRA rank (size of the adapter)."),
                io.Float.Input("alpha", default=16.0, min=0.01, max=1024.0, step=0.5,
                               tooltip="LoRA alpha; the adapter is scaled by alpha / rank."),
                io.Int.Input("batch_size", default=1, min=1, max=64, tooltip="Images per micro-batch (same bucket)."),
                io.Int.Input("grad_accum", default=1, min=1, max=256, tooltip="Micro-batches per optimizer step."),
                io.Combo.Input("optimizer", options=list(OPTIMIZERS), default="AdamW",
                               tooltip="AdamW8bit (bitsandbytes) saves memory and needs a CUDA GPU."),
                io.Combo.Input("lr_schedule", options=list(LR_SCHEDULES), default="constant",
                               tooltip="Learning rate after warmup: constant, or cosine decay to zero."),
                io.Int.Input("warmup_steps", default=0, min=0, max=100000, tooltip="Steps of linear warmup."),
                io.Int.Input("seed", default=0, min=0, max=0xFFFFFFFF, control_after_generate=False,
                             tooltip="Adapter init, batches and noise."),
                io.Combo.Input("dtype", options=list(DTYPES), default="bf16",
                               tooltip="Compute dtype of the frozen model; adapters keep fp32 master weights."),
                io.Boolean.Input("gradient_checkpointing", default=True,
                                 tooltip="Recompute block activations in backward: much less memory, somewhat slower."),
                io.Combo.Input("targets", options=list(TARGET_PRESETS), default="attention",
                               tooltip="attention: q/k/v/out projections; all-linear: every linear layer."),
                io.Int.Input("save_every", default=0, min=0, max=1000000,
                             tooltip="Write a checkpoint to output/<run_name>/checkpoints every N steps (0: at the end only)."),
                io.String.Input("run_name", default="eridiffusion_lora",
                                tooltip="Folder under ComfyUI's output for checkpoints, samples and the loss log."),
                SampleConfig.Input("sample_config", optional=True, tooltip="From SampleDuringTraining (optional)."),
            ],
            outputs=[
                io.Model.Output(display_name="model", tooltip="A copy of the input model with the trained LoRA."),
                LoRA.Output(display_name="lora", tooltip="Connect to SaveLoRA."),
                Loss.Output(display_name="loss", tooltip="Loss history; connect to LossGraph."),
                io.Image.Output(display_name="samples",
                                tooltip="Latest sample grid (a black 64×64 image without a sample_config)."),
            ],
            hidden=[io.Hidden.unique_id],
        )

    @classmethod
    def execute(cls, model, training_data, steps, learning_rate, rank, alpha, batch_size, grad_accum, optimizer,
                lr_schedule, warmup_steps, seed, dtype, gradient_checkpointing, targets, save_every, run_name,
                sample_config=None):
        config = TrainConfig(steps=steps, learning_rate=learning_rate,
                             adapter=AdapterSpec(rank=rank, alpha=alpha, targets=targets), batch_size=batch_size,
                             grad_accum=grad_accum, optimizer=optimizer, lr_schedule=lr_schedule,
                             warmup_steps=warmup_steps, seed=seed, dtype=dtype,
                             gradient_checkpointing=gradient_checkpointing, save_every=save_every,
                             run_name=run_name.strip())
        progress = ProgressBar(steps, node_id=cls.hidden.unique_id)
        hooks = TrainingHooks(
            on_progress=lambda step, total, losses, stats: progress.update_absolute(step, total),
            check_cancel=comfy.model_management.throw_exception_if_processing_interrupted,
        )
        run_dir = unique_run_dir(folder_paths.get_output_directory(), config.run_name)
        # ComfyUI runs nodes under inference_mode; training needs autograd.
        with torch.inference_mode(False), torch.enable_grad():
            result = train_lora(model, training_data, config, run_dir, sample_settings=sample_config, hooks=hooks)
        history = LossHistory(tuple(result.losses), result.eval_loss_before, result.eval_loss_after,
                              result.seconds_per_step, os.path.abspath(run_dir))
        samples = result.samples if result.samples is not None else torch.zeros(1, 64, 64, 3)
        summary = (f"{steps} steps, {result.seconds_per_step:.3g} s/step; evaluation loss "
                   f"{result.eval_loss_before:.4g} -> {result.eval_loss_after:.4g}; files in {run_dir}")
        return io.NodeOutput(result.patcher, result.lora, history, samples, ui={"text": [summary]})
