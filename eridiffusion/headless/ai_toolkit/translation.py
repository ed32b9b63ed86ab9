"""The tables between ai-toolkit's names and EriDiffusion's, and the Translation that collects
EriDiffusion's sections from an ai-toolkit file, naming each value's ai-toolkit key and file."""

from dataclasses import dataclass, field

from ...errors import EriDiffusionError
from ...settings import hinted_end, nearest_hint

TRAINER_TYPES = ("sd_trainer", "ui_trainer", "diffusion_trainer")


ALGORITHMS = {"lora": "lora", "locon": "lora", "dora": "dora", "lokr": "lokr", "loha": "loha"}


DTYPES = {
    "float16": "fp16",
    "fp16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "bf16": "bf16",
    "float32": "fp32",
    "fp32": "fp32",
    "float": "fp32",
}


TIMESTEP_TYPES = {"linear": "uniform", "sigmoid": "sigmoid", "flux_shift": "shift"}


ARCH_FLAGS = {
    "is_v2": "sd2",
    "is_xl": "sdxl",
    "is_v3": "sd3",
    "is_flux": "flux",
    "is_pixart": "pixart",
    "is_pixart_sigma": "pixart_sigma",
    "is_auraflow": "auraflow",
    "is_lumina2": "lumina2",
    "is_ssd": "ssd",
    "is_vega": "vega",
}


# ai-toolkit's archs whose guidance_scale is the guidance embedding's value, not CFG.
GUIDANCE_DISTILLED = ("flux", "flux_kontext")


# EriDiffusion's own model keys, accepted in ai-toolkit's model section too (for separate files).
OWN_MODEL_KEYS = (
    "checkpoint",
    "diffusion_model",
    "weight_dtype",
    "text_encoders",
    "clip_type",
    "vae",
    "low_noise_model",
    "audio_vae",
)


TINY_NAMES = ("tiny-sdxl", "tiny-sd15")


def label(key_path):
    """config.process[0].train.lr for ("config", "process", 0, "train", "lr")."""
    text = ""
    for key in key_path:
        text += f"[{key}]" if isinstance(key, int) else (f".{key}" if text else str(key))
    return text


@dataclass
class Translation:
    """EriDiffusion sections from an ai-toolkit file; `labels` names, per (section, key), the
    ai-toolkit key it came from and that key's file."""

    text: object
    sections: dict = field(
        default_factory=lambda: {"model": {}, "dataset": {}, "cache": {}, "train": {}, "save": {}, "logging": {}}
    )
    labels: dict = field(default_factory=dict)
    unsupported: list = field(default_factory=list)
    output: tuple = ()  # (folder, its file) from training_folder

    def put(self, section, key, value, at):
        if self.sections.get(section) is None:
            self.sections[section] = {}
        self.sections[section][key] = value
        self.labels[(section, key)] = (label(at), self.text.origin(at))

    def skip(self, at, why):
        self.unsupported.append(f"{label(at)} ({why})")

    def unless(self, value, accepted, at, why):
        """A key whose only honoured value is `accepted`: anything else is listed as unsupported."""
        if value != accepted:
            self.skip(at, why)

    def mapping(self, value, at, known):
        if not isinstance(value, dict):
            raise EriDiffusionError(f"{self.text.origin(at)}: {label(at)} must be a mapping of keys (got {value!r}).")
        for key in value:
            if key not in known:
                raise EriDiffusionError(
                    f"{self.text.origin(at + (key,))}: unknown key {label(at + (key,))}{nearest_hint(str(key), known)}"
                )
        return value

    def choice(self, value, table, at):
        name = str(value).strip().lower()
        if name not in table:
            raise EriDiffusionError(
                f"{self.text.origin(at)}: {label(at)} is {value!r}; EriDiffusion takes "
                f"{', '.join(sorted(set(table)))}{hinted_end(name, table)}"
            )
        return table[name]
