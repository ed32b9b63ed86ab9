"""LoRATrainer: MODEL + TRAINING_DATA + settings → trained MODEL, LORA, LOSS, sample grid."""
import contextlib
import json
import os

import comfy.model_management
import folder_paths
import torch
from comfy.utils import ProgressBar
from comfy_api.latest import io
from comfy_execution.utils import get_executing_context

from ..training.atomic_file import write_json_atomic
from ..training.adapters import ALGORITHMS, AUTO_TARGETS, TARGET_PRESETS, AdapterSpec
from ..training.config import CUDA_GRAPHS, DTYPES, LR_SCHEDULES, TrainConfig
from ..training.non_finite import MAX_SKIPS_IN_A_ROW, ON_NAN
from ..training.optimizers import OPTIMIZERS
from ..training.loss_plot import LossHistory
from ..training.trainer import TrainingHooks, train_lora, unique_run_dir
from .progress import ProgressReporter, begin_run, end_run, server_sender, stop_requested
from .types import CATEGORY, LoRA, Loss, Objective, Resume, SampleConfig, TrainingData


@contextlib.contextmanager
def live_hooks(node_id, steps, run_dir):
    """The node's view of a run, while it trains: ComfyUI's progress bar, live events for the page,
    its Cancel (raises) and the page's Stop & save (ends at the next step boundary and saves)."""
    context = get_executing_context()
    prompt_id = context.prompt_id if context is not None else "headless"
    bar = ProgressBar(steps, node_id=node_id)
    reporter = ProgressReporter(server_sender(), node_id, prompt_id, run_dir)

    def on_progress(step, total, losses, stats):
        bar.update_absolute(step, total)
        reporter.on_progress(step, total, losses, stats)

    begin_run(prompt_id, node_id)
    try:
        yield TrainingHooks(on_progress=on_progress,
                            check_cancel=comfy.model_management.throw_exception_if_processing_interrupted,
                            should_stop=lambda: stop_requested(prompt_id, node_id),
                            on_samples=lambda step, grid, paths: reporter.on_samples(step, paths))
    finally:
        end_run(prompt_id, node_id)


def save_workflow(extra_pnginfo, node_id, run_dir):
    """The page's workflow, as queued, into the run folder; reopening it brings the run's loss
    chart back on this trainer node (the page fetches the run's loss history)."""
    workflow = (extra_pnginfo or {}).get("workflow")
    if not workflow:
        return
    workflow = json.loads(json.dumps(workflow))
    for node in workflow.get("nodes", []):
        if str(node.get("id")) == str(node_id):
            node.setdefault("properties", {})["eridiffusion_run"] = os.path.basename(run_dir)
    write_json_atomic(os.path.join(run_dir, "workflow.json"), workflow)


def objective_fields(objective):
    """TrainConfig fields from a TrainingObjective node's output (none: the family defaults)."""
    if objective is None:
        return {}
    return {"objective": objective.spec, "guidance": objective.guidance,
            "bypass_guidance_embedding": objective.bypass_guidance_embedding}


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
                io.Float.Input("learning_rate", default=1e-4, min=1e-7, max=10.0, step=1e-6,
                               tooltip="Peak learning rate of the adapter (Prodigy: 1.0, it sets its own step)."),
                io.Combo.Input("algorithm", options=list(ALGORITHMS), default="lora",
                               tooltip="lora; dora (LoRA + learned magnitude); lokr (Kronecker); loha (Hadamard)."),
                io.Int.Input("rank", default=16, min=1, max=256, tooltip="Adapter rank (its size)."),
                io.Float.Input("alpha", default=16.0, min=0.01, max=1024.0, step=0.5,
                               tooltip="The adapter is scaled by alpha / rank (LoKr with full factors: 1)."),
                io.Int.Input("conv_rank", default=0, min=0, max=256,
                             tooltip="> 0 also adapts the UNet's resnet convolutions (LoCon) at this rank."),
                io.Float.Input("conv_alpha", default=1.0, min=0.01, max=1024.0, step=0.5,
                               tooltip="Alpha of the conv adapters."),
                io.Int.Input("lokr_factor", default=-1, min=-1, max=64,
                             tooltip="LoKr only: Kronecker factor (-1: as balanced as the layer allows)."),
                io.Boolean.Input("lokr_full_rank", default=False,
                                 tooltip="LoKr only: keep both Kronecker factors whole (no low-rank split)."),
                io.Int.Input("batch_size", default=1, min=1, max=64, tooltip="Images per micro-batch (same bucket)."),
                io.Int.Input("grad_accum", default=1, min=1, max=256, tooltip="Micro-batches per optimizer step."),
                io.Combo.Input("optimizer", options=list(OPTIMIZERS), default="AdamW",
                               tooltip="8-bit and paged variants (bitsandbytes) save memory; Prodigy sets its own "
                                       "step size (use learning_rate 1.0). Checked on your device before training."),
                io.Float.Input("text_encoder_lr", default=0.0, min=0.0, max=1.0, step=1e-6,
                               tooltip="> 0 also trains the text encoder(s) at this learning rate (connect clip)."),
                io.Combo.Input("lr_schedule", options=list(LR_SCHEDULES), default="constant",
                               tooltip="Learning rate after warmup: constant, or cosine decay to zero."),
                io.Int.Input("warmup_steps", default=0, min=0, max=100000, tooltip="Steps of linear warmup."),
                io.Int.Input("seed", default=0, min=0, max=0xFFFFFFFF, control_after_generate=False,
                             tooltip="Adapter init, batches and noise."),
                io.Combo.Input("dtype", options=list(DTYPES), default="bf16",
                               tooltip="Compute dtype of the frozen model; adapters keep fp32 master weights."),
                io.Boolean.Input("gradient_checkpointing", default=True,
                                 tooltip="Recompute block activations in backward: much less memory, somewhat slower."),
                io.Float.Input("weights_vram_gib", default=0.0, min=0.0, max=1024.0, step=0.5,
                               tooltip="0: the whole model on the GPU. > 0: keep at most this many GiB of its "
                                       "weights there and stream the rest from CPU memory every step (ComfyUI's "
                                       "partial loading; needs gradient_checkpointing; slower, for small GPUs)."),
                io.Boolean.Input("torch_compile", default=False,
                                 tooltip="torch.compile (inductor) each block of the model: blocks of one kind "
                                         "share a compiled graph. Faster GPU kernels after a one-time compile."),
                io.Combo.Input("cuda_graphs", options=list(CUDA_GRAPHS), default="auto",
                               tooltip="Replay each step from a CUDA graph: on a fast GPU several times faster "
                                       "(the step is launch-bound otherwise). auto: on for CUDA without text-encoder "
                                       "training and with plain tensor inputs; each image size/prompt length "
                                       "is captured once (a few seconds)."),
                io.Combo.Input("targets", options=[AUTO_TARGETS] + list(TARGET_PRESETS), default=AUTO_TARGETS,
                               tooltip="auto: the model family's default (UNets: attention; transformers: blocks). "
                                       "attention: q/k/v/out projections; blocks: every linear layer of the "
                                       "transformer blocks; all-linear: every linear layer."),
                io.Int.Input("save_every", default=0, min=0, max=1000000,
                             tooltip="Write a checkpoint to output/<run_name>/checkpoints every N steps (0: at the end only)."),
                io.Int.Input("keep_last", default=0, min=0, max=1000,
                             tooltip="Keep only the newest N periodic checkpoints (0: keep all)."),
                io.Combo.Input("on_nan", options=list(ON_NAN), default="stop",
                               tooltip="A step whose loss or gradient is NaN/infinite (a diverged run): stop with "
                                       "an error naming the step and the likely cause, keeping the checkpoints "
                                       "written before it; or skip that step's update and go on (the count is in "
                                       f"the summary; {MAX_SKIPS_IN_A_ROW} in a row still stop)."),
                io.String.Input("run_name", default="eridiffusion_lora",
                                tooltip="Folder under ComfyUI's output for checkpoints, samples and the loss log."),
                SampleConfig.Input("sample_config", optional=True, tooltip="From SampleDuringTraining (optional)."),
                io.Clip.Input("clip", optional=True,
                              tooltip="The graph's CLIP: needed to train the text encoder (text_encoder_lr > 0)."),
                Resume.Input("resume", optional=True,
                             tooltip="From LoadLoRAForTraining: continue that run (same settings) or that LoRA."),
                Objective.Input("objective", optional=True,
                                tooltip="From TrainingObjective (optional): timestep sampling, loss weighting, "
                                        "noise offset, guidance. Without it: the model family's defaults."),
            ],
            outputs=[
                io.Model.Output(display_name="model", tooltip="A copy of the input model with the trained LoRA."),
                LoRA.Output(display_name="lora", tooltip="Connect to SaveLoRA."),
                Loss.Output(display_name="loss", tooltip="Loss history; connect to LossGraph."),
                io.Image.Output(display_name="samples",
                                tooltip="Latest sample grid (a black 64×64 image without a sample_config)."),
                io.Clip.Output(display_name="clip",
                               tooltip="A copy of the input CLIP with the trained text-encoder adapter (else the input)."),
            ],
            hidden=[io.Hidden.unique_id, io.Hidden.extra_pnginfo],
        )

    @classmethod
    def execute(cls, model, training_data, steps, learning_rate, algorithm, rank, alpha, conv_rank, conv_alpha,
                lokr_factor, lokr_full_rank, batch_size, grad_accum, optimizer, text_encoder_lr, lr_schedule,
                warmup_steps, seed, dtype, gradient_checkpointing, weights_vram_gib, torch_compile, cuda_graphs,
                targets, save_every, keep_last, on_nan, run_name, sample_config=None, clip=None, resume=None,
                objective=None):
        adapter = AdapterSpec(algorithm=algorithm, rank=rank, alpha=alpha, targets=targets, conv_rank=conv_rank,
                              conv_alpha=conv_alpha, lokr_factor=lokr_factor, lokr_full_rank=lokr_full_rank)
        config = TrainConfig(steps=steps, learning_rate=learning_rate, text_encoder_lr=text_encoder_lr,
                             adapter=adapter, batch_size=batch_size, grad_accum=grad_accum, optimizer=optimizer,
                             lr_schedule=lr_schedule, warmup_steps=warmup_steps, seed=seed, dtype=dtype,
                             gradient_checkpointing=gradient_checkpointing, weights_vram_gib=weights_vram_gib,
                             torch_compile=torch_compile, cuda_graphs=cuda_graphs,
                             save_every=save_every, keep_last=keep_last, on_nan=on_nan, run_name=run_name.strip(),
                             **objective_fields(objective))
        run_dir = unique_run_dir(folder_paths.get_output_directory(), config.run_name)
        save_workflow(cls.hidden.extra_pnginfo, cls.hidden.unique_id, run_dir)
        # ComfyUI runs nodes under inference_mode; training needs autograd.
        with live_hooks(cls.hidden.unique_id, steps, run_dir) as hooks, torch.inference_mode(False), \
                torch.enable_grad():
            result = train_lora(model, training_data, config, run_dir, sample_settings=sample_config, hooks=hooks,
                                clip=clip, resume=resume)
        history = LossHistory(tuple(result.losses), result.eval_loss_before, result.eval_loss_after,
                              result.seconds_per_step, os.path.abspath(run_dir))
        samples = result.samples if result.samples is not None else torch.zeros(1, 64, 64, 3)
        memory = f", peak VRAM {result.peak_memory_gib:.1f} GiB" if result.peak_memory_gib else ""
        skipped = f" ({result.skipped_steps} skipped: non-finite loss or gradient)" if result.skipped_steps else ""
        summary = (f"{len(result.losses)} steps{skipped}, {result.seconds_per_step:.3g} s/step{memory}; evaluation "
                   f"loss {result.eval_loss_before:.4g} -> {result.eval_loss_after:.4g}; files in {run_dir}")
        out_clip = result.clip if result.clip is not None else clip
        return io.NodeOutput(result.patcher, result.lora, history, samples, out_clip, ui={"text": [summary]})
