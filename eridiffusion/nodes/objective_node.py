"""TrainingObjective: timestep sampling, loss weighting, noise offset and guidance for LoRATrainer."""
from dataclasses import dataclass

from comfy_api.latest import io

from ..training.objective import LOSS_WEIGHTINGS, TIMESTEP_SAMPLINGS, ObjectiveSpec
from .types import CATEGORY, Objective


@dataclass(frozen=True)
class ObjectiveSettings:
    """What the node hands to LoRATrainer."""
    spec: ObjectiveSpec
    guidance: float
    bypass_guidance_embedding: bool


class TrainingObjective(io.ComfyNode):
    @classmethod
    def define_schema(cls):
        return io.Schema(
            node_id="EriDiffusion_TrainingObjective",
            display_name="TrainingObjective",
            category=CATEGORY,
            description="How noise levels are drawn and the loss weighted (without this node: the model "
                        "family's defaults, see the README's support table).",
            inputs=[
                io.Combo.Input("timestep_sampling", options=list(TIMESTEP_SAMPLINGS), default="auto",
                               tooltip="auto: the family's default. uniform; logit_normal (SD3); sigmoid "
                                       "(t = sigmoid(scale·N)); shift (sigmoid, then shifted to more noise; "
                                       "flow models only)."),
                io.Float.Input("logit_mean", default=0.0, min=-5.0, max=5.0, step=0.05,
                               tooltip="logit_normal: mean of logit(t); > 0 favours more noise."),
                io.Float.Input("logit_std", default=1.0, min=0.05, max=5.0, step=0.05,
                               tooltip="logit_normal: spread of logit(t)."),
                io.Float.Input("sigmoid_scale", default=1.0, min=0.05, max=10.0, step=0.05,
                               tooltip="sigmoid and shift: scale of the normal draw."),
                io.Float.Input("shift", default=0.0, min=0.0, max=100.0, step=0.05,
                               tooltip="shift: sigma = s·t / (1 + (s-1)·t); 0: s from the image size, as Flux does."),
                io.Combo.Input("loss_weighting", options=list(LOSS_WEIGHTINGS), default="none",
                               tooltip="min_snr: min-SNR-γ weighting (ε and v models only)."),
                io.Float.Input("min_snr_gamma", default=5.0, min=0.1, max=100.0, step=0.1, tooltip="γ of min_snr."),
                io.Float.Input("noise_offset", default=0.0, min=0.0, max=1.0, step=0.01,
                               tooltip="Offset noise (per sample and channel): helps very dark/bright images; ~0.05."),
                io.Float.Input("guidance", default=-1.0, min=-1.0, max=100.0, step=0.1,
                               tooltip="-1: the family's default (Flux.1 dev, HunyuanVideo: 1.0). Guidance input "
                                       "of guidance-distilled models (Flux.1 dev, HunyuanVideo) "
                                       "during training; others ignore it."),
                io.Boolean.Input("bypass_guidance_embedding", default=False,
                                 tooltip="Train with the guidance embedding skipped (Flux.1 dev: no guidance input)."),
            ],
            outputs=[Objective.Output(display_name="objective", tooltip="Connect to LoRATrainer.")],
        )

    @classmethod
    def execute(cls, timestep_sampling, logit_mean, logit_std, sigmoid_scale, shift, loss_weighting, min_snr_gamma,
                noise_offset, guidance, bypass_guidance_embedding):
        spec = ObjectiveSpec(timestep_sampling=timestep_sampling, logit_mean=logit_mean, logit_std=logit_std,
                             sigmoid_scale=sigmoid_scale, shift=shift, loss_weighting=loss_weighting,
                             min_snr_gamma=min_snr_gamma, noise_offset=noise_offset)
        return io.NodeOutput(ObjectiveSettings(spec, guidance, bypass_guidance_embedding))
