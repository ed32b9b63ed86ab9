"""What one sample prompt renders from, as ComfyUI's nodes would build it: its conditionings (with
their reference latents and guidance), its size, seed, steps and cfg, and for inpainting the source
latent and its mask (InpaintModelConditioning's). Also the checks that the model reads each of them."""

import inspect
from dataclasses import dataclass, replace

import node_helpers
import numpy as np
import torch

from ...errors import EriDiffusionError
from ..data.buckets import fit_to_bucket
from ..data.media import open_image_rgb, open_mask
from ..data.picture_prompts import reads_images
from ..model.edit_conditioning import encode_with_references
from ..model.inputs import takes_start_image

# what an image-to-video node sets on the conditioning (WanImageToVideo, HunyuanVideo15ImageToVideo)
START_KEYS = ("concat_latent_image", "concat_mask", "clip_vision_output")


@dataclass(frozen=True)
class PromptSample:
    """One prompt as it renders."""

    text: str
    positive: list
    negative: list
    width: int
    height: int
    seed: int
    steps: int
    cfg: float
    guidance: float | None = None  # set on the conditioning; kept to check the model reads it
    references: int = 0  # how many reference latents the conditioning carries
    latent: torch.Tensor | None = None  # inpainting: the source image's latent, sampled from ...
    noise_mask: torch.Tensor | None = None  # ... only where this mask is white
    source: torch.Tensor | None = None  # inpainting: the source IMAGE, pasted back where the mask is black
    starts: bool = False  # image-to-video: the conditionings carry SampleDuringTraining's start image

    def pasted(self, frames):
        """Decoded `frames` (n, H, W, 3) with the source image kept outside the mask, as inpainting
        workflows composite it (ImageCompositeMasked); other samples unchanged."""
        if self.source is None:
            return frames
        assert self.noise_mask is not None  # an inpainting sample has both
        mask = self.noise_mask.reshape(1, *self.noise_mask.shape[-2:], 1).to(frames)
        return frames * mask + self.source.to(frames) * (1 - mask)

    def checked_for(self, model):
        """Self, or an error naming the prompt and the fix when `model` ignores one of its settings."""
        where = f"SampleDuringTraining: prompt '{self.text[:40]}'"
        if self.guidance is not None and not reads_guidance(model):
            raise EriDiffusionError(
                f"{where} sets --g {self.guidance:g}, but {type(model).__name__} has no guidance embedding; "
                "use --cfg for classifier-free guidance."
            )
        if self.references and not reads_condition(model, "reference_latents"):
            raise EriDiffusionError(
                f"{where} names reference images, but {type(model).__name__} reads none; "
                "remove --ref (references are for edit models: Flux Kontext, Flux.2, Qwen-Image-Edit)."
            )
        if self.latent is not None and not takes_inpaint_channels(model):
            raise EriDiffusionError(
                f"{where} names an --image and --mask to fill, but {type(model).__name__} has no inpainting "
                "input channels; remove them (inpainting is for Flux Fill and other inpaint models)."
            )
        if self.starts and not self._start_read_by(model):
            raise EriDiffusionError(
                f"SampleDuringTraining's start_image is connected, but this model (ComfyUI's "
                f"{type(model.model_config).__name__}) takes no start image: it is a text-to-video model. Disconnect "
                "start_image, or train the image-to-video model (Wan 2.1 I2V, Wan 2.2 I2V 14B, HunyuanVideo 1.5 I2V)."
            )
        return self

    def _start_read_by(self, model):
        """Whether `model` reads the start image set on the positive conditioning."""
        options = self.positive[0][1]
        start = {key: options[key] for key in START_KEYS if key in options}
        plain = [[cond, {k: v for k, v in each.items() if k not in START_KEYS}] for cond, each in self.positive]
        concat = start["concat_latent_image"]
        latent = torch.zeros(model.latent_format.latent_channels, *concat.shape[2:])
        return takes_start_image(model, plain, latent, (self.width, self.height), start)


def prompt_sample(clip, vae, spec, settings, index, encode):
    """The PromptSample of PromptSpec `spec` (prompt `index`) with SamplerSettings `settings` for
    what the line leaves out; `encode(text)` is the graph's text encoding of a prompt."""
    width, height = spec.width or settings.width, spec.height or settings.height
    if spec.edit and not reads_images(clip):
        raise EriDiffusionError(
            f"SampleDuringTraining: prompt '{spec.text[:40]}' sets --edit, which encodes it as Qwen-Image-Edit's "
            "instruction, but this CLIP is not Qwen-Image's vision-language encoder; remove --edit."
        )
    references = [image_tensor(path, (width, height)) for path in spec.references]
    positive = encode_with_references(clip, vae, spec.text, references, encode, spec.edit)
    negative = encode_with_references(clip, vae, spec.negative or "", references, encode, spec.edit)
    if spec.guidance is not None:  # as FluxGuidance sets it
        positive = node_helpers.conditioning_set_values(positive, {"guidance": spec.guidance})
    sample = PromptSample(
        text=spec.text,
        positive=positive,
        negative=negative,
        width=width,
        height=height,
        seed=spec.seed if spec.seed is not None else settings.seed + index,
        steps=spec.steps or settings.steps,
        cfg=spec.cfg if spec.cfg is not None else settings.cfg,
        guidance=spec.guidance,
        references=len(references),
    )
    return with_inpainting(sample, vae, spec) if spec.image else sample


def with_inpainting(sample, vae, spec):
    """`sample` with InpaintModelConditioning's inputs of the line's --image and --mask: the
    conditionings carry the masked image and the mask, the latent is the image's, noised only
    where the mask is white; the image is pasted back outside the mask after decoding."""
    import nodes  # ComfyUI's

    size = (sample.width, sample.height)
    pixels, mask = image_tensor(spec.image, size), mask_tensor(spec.mask, size)
    positive, negative, latent = nodes.InpaintModelConditioning().encode(
        sample.positive, sample.negative, pixels, vae, mask, True
    )
    return replace(
        sample,
        positive=positive,
        negative=negative,
        latent=latent["samples"],
        noise_mask=latent["noise_mask"],
        source=pixels,
    )


def image_tensor(path, size):
    """ComfyUI's IMAGE (1, H, W, 3) of the image at `path`, resized and center-cropped to `size`
    (width, height), as training fits an image to its bucket."""
    fitted, _ = fit_to_bucket(open_image_rgb(path), size)
    return torch.from_numpy(np.asarray(fitted, dtype=np.float32) / 255.0)[None]


def mask_tensor(path, size):
    """ComfyUI's MASK (1, H, W) of the mask at `path` (white: 1), fitted to `size` as its image is."""
    fitted, _ = fit_to_bucket(open_mask(path), size)
    return torch.from_numpy(np.asarray(fitted, dtype=np.float32) / 255.0)[None]


def reads_guidance(model):
    """Whether the model embeds a guidance value (Flux.1 dev, HunyuanVideo ...)."""
    params = getattr(model.diffusion_model, "params", None)
    return bool(getattr(params, "guidance_embed", False))


def reads_condition(model, name):
    """Whether ComfyUI's model class turns conditioning option `name` into a model input: one of
    the extra_conds of its class and its bases reads it."""
    for cls in type(model).__mro__:
        method = cls.__dict__.get("extra_conds")
        if method is not None and f'"{name}"' in inspect.getsource(method):
            return True
    return False


def takes_inpaint_channels(model):
    """Whether the model stacks a masked image and its mask on its input channels, as the host feeds
    them from InpaintModelConditioning: an inpainting UNet (ComfyUI's set_inpaint: mask and masked
    image) or FLUX.1 Fill (the latent's channels twice and the mask unshuffled 8x8: 64 more)."""
    import comfy.model_base

    if tuple(getattr(model, "concat_keys", ())) == ("mask", "masked_image"):
        return True
    config = model.model_config.unet_config
    c_in, c_out = config.get("in_channels"), config.get("out_channels")
    return isinstance(model, comfy.model_base.Flux) and c_in is not None and c_in == 2 * (c_out or 0) + 64
