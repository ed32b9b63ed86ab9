"""The LoRA toolbox's node settings, declared once: the file each verb reads and writes, a rank or an
energy share, and the LoRAs (with weights) merge takes."""

from dataclasses import dataclass

from ..errors import EriDiffusionError
from ..settings import Setting, SettingInfo, check_settings, setting

_LORA_HELP = "The LoRA file: a name inside models/loras (as LoraLoader lists it) or a full path."
_OUTPUT_HELP = "Name of the file to write inside models/{} (subfolders allowed); an existing name gets a number."
_OVERWRITE_HELP = "Replace an existing file of that name (otherwise a number is appended)."
_RANK_HELP = "Every layer at this rank at most; 0: by energy instead."
_ENERGY_HELP = "Each layer at the smallest rank keeping this share of its weight change, ‖ΔW_r‖/‖ΔW‖; 0: by rank."


# A LoRA's weight in a merge, or its strength merged into a checkpoint (every `name: weight` line of the
# nodes, --weights on the command line): LoraLoader's strength range, beyond which a LoRA only breaks a model.
WEIGHT = Setting(
    "weight",
    float,
    1.0,
    SettingInfo(
        "Its weight change is scaled by this (1: as trained; LoraLoader's strengths go from -100 to 100): "
        "give a number such as 0.8.",
        minimum=-100.0,
        maximum=100.0,
    ),
)


def rank_or_energy(settings: "ResizeSettings | ExtractSettings") -> tuple[int | None, float | None]:
    """(rank, energy) with 0 read as 'not given'."""
    return settings.rank or None, settings.energy or None


@dataclass(frozen=True)
class InspectSettings:
    lora: str = setting("my_lora.safetensors", _LORA_HELP)


@dataclass(frozen=True)
class ConvertSettings:
    lora: str = setting("my_lora.safetensors", _LORA_HELP)
    to: str = setting(
        "comfyui", "comfyui: ComfyUI's keys for the MODEL; peft: diffusers/PEFT's keys.", choices=("comfyui", "peft")
    )
    output: str = setting("converted/my_lora", _OUTPUT_HELP.format("loras"))
    overwrite: bool = setting(False, _OVERWRITE_HELP)

    def __post_init__(self) -> None:
        check_settings(self, "ConvertLoRA")


@dataclass(frozen=True)
class ResizeSettings:
    lora: str = setting("my_lora.safetensors", _LORA_HELP)
    rank: int = setting(16, _RANK_HELP, minimum=0, maximum=1024)
    energy: float = setting(0.0, _ENERGY_HELP, minimum=0.0, maximum=1.0, step=0.01)
    output: str = setting("resized/my_lora", _OUTPUT_HELP.format("loras"))
    overwrite: bool = setting(False, _OVERWRITE_HELP)

    def __post_init__(self) -> None:
        check_settings(self, "ResizeLoRA")


@dataclass(frozen=True)
class MergeSettings:
    loras: str = setting(
        "first_lora.safetensors: 1.0\nsecond_lora.safetensors: 0.5",
        "One LoRA per line, as `name: weight` (weight 1 when left out); names inside models/loras or full paths.",
        multiline=True,
    )
    rank: int = setting(
        0, "0: exact (the ranks concatenated); else each layer's sum cut to this rank by SVD.", minimum=0
    )
    output: str = setting("merged/my_lora", _OUTPUT_HELP.format("loras"))
    overwrite: bool = setting(False, _OVERWRITE_HELP)

    def __post_init__(self) -> None:
        check_settings(self, "MergeLoRAs")


@dataclass(frozen=True)
class MergeIntoCheckpointSettings:
    loras: str = setting(
        "my_lora.safetensors: 1.0",
        "One LoRA per line, as `name: strength` (1 when left out), applied to the MODEL and the CLIP as LoraLoader "
        "applies it.",
        multiline=True,
    )
    output: str = setting("merged/my_checkpoint", _OUTPUT_HELP.format("checkpoints"))
    overwrite: bool = setting(False, _OVERWRITE_HELP)

    def __post_init__(self) -> None:
        check_settings(self, "MergeLoRAIntoCheckpoint")


@dataclass(frozen=True)
class ExtractSettings:
    rank: int = setting(16, _RANK_HELP, minimum=0, maximum=4096)
    energy: float = setting(0.0, _ENERGY_HELP, minimum=0.0, maximum=1.0, step=0.01)
    dtype: str = setting("fp16", "Precision of the saved weights.", choices=("fp16", "bf16", "fp32"))
    output: str = setting("extracted/my_lora", _OUTPUT_HELP.format("loras"))
    overwrite: bool = setting(False, _OVERWRITE_HELP)

    def __post_init__(self) -> None:
        check_settings(self, "ExtractLoRA")


def weighted_lines(text: str, what: str) -> list[tuple[str, float]]:
    """[(name, weight)] of `name: weight` lines (blank lines skipped; weight 1 when the line ends in no
    `: weight`, so a Windows path's drive colon stays part of its name); a weight that is no number is named."""
    out: list[tuple[str, float]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        name, colon, weight = line.rpartition(":")
        if not colon or any(c in weight for c in "/\\") or weight.strip().endswith(".safetensors"):
            out.append((line.strip(), 1.0))
            continue
        try:
            out.append((name.strip(), float(weight)))
        except ValueError:
            raise EriDiffusionError(
                f"{what}: line {number} ({line.strip()!r}) has weight {weight.strip()!r}, which is no number; "
                "write `name: weight`, e.g. `my_lora.safetensors: 0.8`."
            ) from None
    if not out:
        raise EriDiffusionError(f"{what}: no LoRA given; write one `name: weight` per line.")
    return out
