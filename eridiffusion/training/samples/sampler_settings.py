"""SampleDuringTraining's settings (a config file's `sample:` section) and the checks of them that need
no model: declared apart from the rendering, so reading a config imports none of ComfyUI's sampling code."""

from dataclasses import dataclass

from ...errors import EriDiffusionError
from ...settings import check_settings, setting, settings_of
from .prompts import parse_prompt_line


def _samplers():
    import comfy.samplers  # the host's, asked only for a sampler other than the default

    return tuple(comfy.samplers.KSampler.SAMPLERS)


def _schedulers():
    import comfy.samplers

    return tuple(comfy.samplers.KSampler.SCHEDULERS)


@dataclass(frozen=True)
class SamplerSettings:
    """SampleDuringTraining's inputs (and a config file's `sample:` section): what to render, how often."""

    prompts: str = setting(
        "a photo of sks dog",
        "One prompt per line, each with optional flags of its own (kohya's prompt files): --n negative "
        "prompt, --w width, --h height, --seed, --cfg, --steps, --g guidance (Flux dev), --ref image "
        "(edit models, up to 3), --edit (Qwen-Image-Edit without references), --image and --mask "
        "(inpainting). Relative image paths: ComfyUI's input "
        "folder (a config file's own folder headless).",
        multiline=True,
    )
    every: int = setting(100, "Render every N training steps (and at the end).", minimum=1, maximum=100000)
    seed: int = setting(0, "Noise seed; prompt k uses seed + k.", minimum=0, maximum=0xFFFFFFFF, seed=True)
    steps: int = setting(20, "Sampling steps.", minimum=1, maximum=200)
    cfg: float = setting(7.0, "Classifier-free guidance scale.", minimum=0.0, maximum=30.0, step=0.1)
    sampler_name: str = setting("euler", "ComfyUI sampler.", choices=_samplers)
    scheduler: str = setting("normal", "ComfyUI scheduler.", choices=_schedulers)
    width: int = setting(1024, "Sample width in pixels.", minimum=64, maximum=4096, step=8)
    height: int = setting(1024, "Sample height in pixels.", minimum=64, maximum=4096, step=8)
    frames: int = setting(
        1,
        "Video models: frames per sample, saved as an animated WebP beside the "
        "first frame's PNG (Wan/HunyuanVideo take 4k+1, LTX-Video 8k+1). Image "
        "models render one image whatever this says.",
        minimum=1,
        maximum=1024,
        optional=True,
        group="media",
    )
    seconds: float = setting(
        10.0,
        "Audio models (ACE-Step 1.5): seconds per sample, written as FLAC (each prompt line is the "
        "tags, rendered instrumental); width, height and frames are then unused.",
        minimum=1.0,
        maximum=600.0,
        step=0.1,
        optional=True,
        group="media",
    )

    def __post_init__(self):
        check_settings(self, "SampleDuringTraining")
        if not self.prompt_lines():
            raise EriDiffusionError("SampleDuringTraining: prompts is empty; write one prompt per line.")
        self.prompt_specs(None)  # every line's flags and numbers, before anything is encoded

    def prompt_lines(self):
        return tuple(line.strip() for line in self.prompts.splitlines() if line.strip())

    def prompt_specs(self, image_folder):
        """The PromptSpec of each line (its text and own settings); relative image paths are taken
        from `image_folder`, and each image opened (None: paths kept as written, not opened)."""
        declared = settings_of(self)
        return tuple(
            parse_prompt_line(line, k + 1, declared, image_folder) for k, line in enumerate(self.prompt_lines())
        )

    def check_sizes(self, vae, image_folder):
        """check_sample_size of every prompt's size (its own, or width x height)."""
        for spec in self.prompt_specs(image_folder):
            check_sample_size(vae, spec.width or self.width, spec.height or self.height)


def check_sample_size(vae, width, height):
    """Sample sizes the VAE cannot draw exactly (a latent pixel is `ratio` image pixels): an error
    with the nearest sizes that it can, not an image silently cut to a smaller size."""
    ratio = vae.spacial_compression_encode()
    for name, value, drawn in (("width", width, "wide"), ("height", height, "high")):
        if value % ratio:
            below, above = value - value % ratio, value - value % ratio + ratio
            raise EriDiffusionError(
                f"SampleDuringTraining: {name} {value} is not a multiple of {ratio}, the VAE's pixels per latent "
                f"pixel, so the samples would be {below} {drawn}; set {below} or {above}."
            )
