"""LoRATrainer: MODEL + TRAINING_DATA + settings → trained MODEL, LORA, LOSS, sample grid."""

import contextlib
import json
import os
from typing import Any

import comfy.model_management
import folder_paths
import torch
from comfy.utils import ProgressBar
from comfy_api.latest import io
from comfy_execution.utils import get_executing_context

from ..formats.atomic_file import write_json_atomic
from ..training.data.training_data import TrainingData
from ..training.run.config import train_config_from, training_settings
from ..training.run.loss_plot import LossHistory
from ..training.run.preflight import preflight
from ..training.run.request import RunRequest
from ..training.run.resume import ResumePoint
from ..training.run.run_folder import unique_run_dir
from ..training.run.summary import validation_summary
from ..training.run.trainer import TrainingHooks, train_run
from ..training.samples.render import SampleSettings
from . import sockets
from .options_nodes import OPTIONS_NODES
from .progress import ProgressReporter, begin_run, end_run, server_sender, stop_requested
from .setting_inputs import inputs_for
from .sockets import CATEGORY


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
        yield TrainingHooks(
            on_progress=on_progress,
            check_cancel=comfy.model_management.throw_exception_if_processing_interrupted,
            should_stop=lambda: stop_requested(prompt_id, node_id),
            on_samples=lambda step, grid, paths: reporter.on_samples(step, paths),
        )
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


# Optional inputs whose SettingValues feed the run's settings (a node left out: the defaults).
SETTING_SOCKETS = ("objective",) + tuple(node.TRAINER_INPUT for node in OPTIONS_NODES)


class LoRATrainer(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="EriDiffusion_LoRATrainer",
            display_name="LoRATrainer",
            category=CATEGORY,
            description="Trains a LoRA on the MODEL and returns a copy of it with the LoRA applied (algorithm full: "
            "the model's own weights, a full fine-tune).",
            inputs=[
                io.Model.Input("model", tooltip="The model to train on; it is not changed."),
                sockets.TrainingData.Input("training_data", tooltip="From CacheLatents."),
                *inputs_for(training_settings(), "trainer"),  # what most runs change
                sockets.SampleConfig.Input(
                    "sample_config", optional=True, tooltip="From SampleDuringTraining (optional)."
                ),
                io.Clip.Input(
                    "clip",
                    optional=True,
                    tooltip="The graph's CLIP: needed to train the text encoder (text_encoder_lr > 0).",
                ),
                sockets.Resume.Input(
                    "resume",
                    optional=True,
                    tooltip="From LoadLoRAForTraining: continue that run (same settings) or that LoRA.",
                ),
                sockets.Objective.Input(
                    "objective",
                    optional=True,
                    tooltip="From TrainingObjective (optional): timestep sampling, loss weighting, "
                    "noise offset, guidance; two experts' low-noise model. Without it: the model family's defaults.",
                ),
                *[
                    node.SOCKET.Input(
                        node.TRAINER_INPUT,
                        optional=True,
                        tooltip=f"From {node.DISPLAY_NAME} (optional; without it: its defaults). {node.DESCRIPTION}",
                    )
                    for node in OPTIONS_NODES
                ],
            ],
            outputs=[
                io.Model.Output(
                    display_name="model", tooltip="A copy of the input model with the trained LoRA (or weights)."
                ),
                sockets.LoRA.Output(
                    display_name="lora", tooltip="Connect to SaveLoRA (algorithm full: SaveFineTune, or SaveLoRA)."
                ),
                sockets.Loss.Output(display_name="loss", tooltip="Loss history; connect to LossGraph."),
                io.Image.Output(
                    display_name="samples", tooltip="Latest sample grid (a black 64×64 image without a sample_config)."
                ),
                io.Clip.Output(
                    display_name="clip",
                    tooltip="A copy of the input CLIP with the trained text-encoder adapter (else the input).",
                ),
                io.Model.Output(
                    display_name="low_noise_model",
                    tooltip="With TrainingObjective's low_noise_model: a copy of it with its trained LoRA (else None).",
                ),
                sockets.LoRA.Output(
                    display_name="low_noise_lora",
                    tooltip="With TrainingObjective's low_noise_model: its LoRA; connect to a second SaveLoRA "
                    "(…_low_noise).",
                ),
            ],
            hidden=[io.Hidden.unique_id, io.Hidden.extra_pnginfo],
        )

    @classmethod
    def execute(
        cls,
        model: Any,
        training_data: TrainingData,
        sample_config: SampleSettings | None = None,
        clip: Any = None,
        resume: ResumePoint | None = None,
        **inputs: Any,
    ) -> io.NodeOutput:
        low_noise_model = getattr(inputs.get("objective"), "low_noise_model", None)  # two experts
        connected = [inputs.pop(name, None) for name in SETTING_SOCKETS]
        config = train_config_from(inputs, [settings.values for settings in connected if settings is not None])
        request = RunRequest(model, training_data, config, clip, resume, sample_config, low_noise_model=low_noise_model)
        preflight(request)  # before the run's folder is made
        run_dir = unique_run_dir(folder_paths.get_output_directory(), config.run_name)
        save_workflow(cls.hidden.extra_pnginfo, cls.hidden.unique_id, run_dir)
        # ComfyUI runs nodes under inference_mode; training needs autograd.
        with (
            live_hooks(cls.hidden.unique_id, config.steps, run_dir) as hooks,
            torch.inference_mode(False),
            torch.enable_grad(),
        ):
            result = train_run(request, run_dir, hooks)
        history = LossHistory.of(result)
        samples = result.samples if result.samples is not None else torch.zeros(1, 64, 64, 3)
        memory = f", peak VRAM {result.peak_memory_gib:.1f} GiB" if result.peak_memory_gib else ""
        skipped = f" ({result.skipped_steps} skipped: non-finite loss or gradient)" if result.skipped_steps else ""
        summary = (
            f"{len(result.losses)} steps{skipped}, {result.seconds_per_step:.3g} s/step{memory}; evaluation "
            f"loss {result.eval_loss_before:.4g} -> {result.eval_loss_after:.4g}{validation_summary(result)}; "
            f"files in {run_dir}"
        )
        out_clip = result.clip if result.clip is not None else clip
        low = result.low_noise
        return io.NodeOutput(
            result.patcher,
            result.lora,
            history,
            samples,
            out_clip,
            low.patcher if low is not None else None,
            low.lora if low is not None else None,
            ui={"text": [summary]},
        )
