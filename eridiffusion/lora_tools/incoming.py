"""A LoRA file as the verbs that rewrite LoRA files (resize, merge) take it in. With the model at hand (the
node's MODEL, --model), a file in any trainer's format convert reads (ai-toolkit, diffusers/PEFT, kohya,
LyCORIS, musubi-tuner, OneTrainer, SimpleTuner) is converted to ComfyUI's keys for that model on the way
in (convert.py), and the result is in ComfyUI's keys. Without it, a file is read as written (a PEFT or
diffusers file with its LoraConfig's alphas, written back in its own spelling: peft_layers.py); files
that name their layers by different conventions are refused, since no layer of one would meet the
other's. Each says what it read."""

from dataclasses import dataclass, field
from typing import Any

from ..errors import EriDiffusionError
from ..formats.layer_names import layer_naming
from ..formats.lora_conventions import TEXT_ENCODER_PREFIXES, peft_weights_file
from .lora_layers import LoRAFile, lora_of
from .model_layout import WeightReader
from .peft_layers import read_lora_as_written

CONVERT_ON_THE_WAY_IN = (
    "Give the model the LoRAs are for (--model on the command line, the node's MODEL input): each file is "
    "converted to ComfyUI's keys for it on the way in"
)


@dataclass
class Incoming:
    lora: LoRAFile  # its path: the file as the user named it
    peft: bool = False  # read as written from a PEFT/diffusers file: written back in that spelling
    read: list[str] = field(default_factory=list)  # what was read, for the verb's report


def take_in(path: str, model: Any = None, weights: WeightReader | None = None) -> Incoming:
    """LoRA file `path` (or PEFT's save_pretrained folder) as a verb takes it: converted to ComfyUI's keys
    for ComfyUI model `model` (a BaseModel or a model_layout; `weights`: its weights where it holds none,
    for PEFT DoRA layers), or, without a model, as written."""
    if model is None:
        lora, alphas = read_lora_as_written(path)
        if alphas is None:
            return Incoming(lora)
        return Incoming(
            lora,
            peft=True,
            read=[
                f"  {lora.path}: read a PEFT/diffusers file (lora_A/lora_B), alphas: {alphas}; written the same "
                "way, each layer's scale folded into lora_B (its LoraConfig in the metadata at alpha = rank)"
            ],
        )
    from .convert import converted_for

    source = peft_weights_file(path)
    tensors, metadata, converted = converted_for(path, model, weights)
    lora = lora_of(source, tensors, metadata)
    spellings = ", ".join(f"{count} named {spelling}" for spelling, count in converted.spellings.most_common())
    read = [
        f"  {source}: read {converted.layers} layers, converted to ComfyUI's keys for {type(model).__name__} "
        f"({spellings}; alphas: {converted.alphas})"
    ]
    return Incoming(lora, read=read)


def naming(layer: str) -> str | None:
    """How a layer name is written (layer_naming); None for a text encoder's layer (each trainer names
    those its own way)."""
    return None if layer.startswith(TEXT_ENCODER_PREFIXES) else layer_naming(layer)


def check_one_naming(taken: list[Incoming], verb: str) -> bool:
    """Whether the files are written back as PEFT/diffusers files (all of them are such) or in ComfyUI's
    tensor names; files whose layers are named by different conventions, or a PEFT file beside others,
    are refused naming the model input that converts them."""
    peft = [t.lora.path for t in taken if t.peft]
    if peft and len(peft) < len(taken):
        other = next(t.lora.path for t in taken if not t.peft)
        raise EriDiffusionError(
            f"{verb}: {peft[0]} is a PEFT/diffusers file (lora_A/lora_B) and {other} is not; their layer names "
            f"differ. {CONVERT_ON_THE_WAY_IN} (or convert the PEFT file first: eridiffusion lora convert)."
        )
    namings = {t.lora.path: {naming(layer) for layer in t.lora.layers} - {None} for t in taken}
    first, *others = namings
    for path in others:
        if namings[path] and namings[first] and namings[path] != namings[first]:
            raise EriDiffusionError(
                f"{verb}: {first} names its layers {', '.join(sorted(map(str, namings[first])))} and {path} "
                f"{', '.join(sorted(map(str, namings[path])))}; no layer of one would meet the other's. "
                f"{CONVERT_ON_THE_WAY_IN}."
            )
    return bool(peft)
