"""LossGraph: LOSS → IMAGE of the loss curve (raw and smoothed), also saved beside the run."""

import os

from comfy_api.latest import io, ui

from ..formats.atomic_file import write_atomic
from ..training.run.loss_plot import LossHistory, as_image_tensor, draw_loss_plot
from . import sockets
from .sockets import CATEGORY


class LossGraph(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="EriDiffusion_LossGraph",
            display_name="LossGraph",
            category=CATEGORY,
            description="Plots the training loss, raw and smoothed, and the validation loss when there is one.",
            is_output_node=True,
            inputs=[sockets.Loss.Input("loss", tooltip="From LoRATrainer.")],
            outputs=[io.Image.Output(display_name="image", tooltip="The plot.")],
        )

    @classmethod
    def execute(cls, loss: LossHistory) -> io.NodeOutput:
        title = (
            f"loss (eval {loss.eval_loss_before:.4g} -> {loss.eval_loss_after:.4g}, {loss.seconds_per_step:.3g} s/step)"
        )
        if loss.best_step is not None:
            title += f"; best validation at step {loss.best_step}"
        picture = draw_loss_plot(list(loss.losses), title=title, validation=loss.validation)
        write_atomic(
            os.path.join(loss.run_dir, "loss.png"), lambda tmp: picture.save(tmp, format="PNG"), overwrite=True
        )
        image = as_image_tensor(picture)
        return io.NodeOutput(image, ui=ui.PreviewImage(image, cls=cls))
