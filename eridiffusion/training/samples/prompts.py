"""One sample prompt line with its own settings, as kohya's prompt files write them:
`a dog on a beach --n blurry --w 512 --h 768 --seed 3 --cfg 4 --steps 20`; a flag left out takes
SampleDuringTraining's value. `--ref` names a reference image (edit models, up to three), `--edit`
makes the line an edit instruction without one (Qwen-Image-Edit), `--image` and `--mask` the image and
mask an inpainting model fills."""

import os
import re
from dataclasses import dataclass
from typing import Any

from ...errors import EriDiffusionError
from ...settings import Setting, SettingInfo, check_value, nearest_hint
from ..data.media import check_mask_fits, open_image_rgb

# flag (with kohya's and musubi-tuner's short names) -> the PromptSpec field it sets
FLAGS = {
    "n": "negative",
    "neg": "negative",
    "negative": "negative",
    "w": "width",
    "width": "width",
    "h": "height",
    "height": "height",
    "d": "seed",
    "seed": "seed",
    "l": "cfg",
    "cfg": "cfg",
    "s": "steps",
    "steps": "steps",
    "g": "guidance",
    "guidance": "guidance",
    "ref": "references",
    "ci": "references",
    "control": "references",
    "image": "image",
    "mask": "mask",
    "edit": "edit",
}
SWITCHES = ("edit",)  # flags that take no value
MAX_REFERENCES = 3  # as TextEncodeQwenImageEditPlus's image1..image3
# the guidance a guidance-distilled model embeds (FluxGuidance's value), not a node input
GUIDANCE = Setting("guidance", float, 3.5, SettingInfo("The guidance the model embeds.", minimum=0.0, maximum=100.0))
# any word starting with -- is a flag (an unknown or misspelt one is named, not read as prompt text)
_FLAG = re.compile(r"(?:^|\s)--(\S+)(?=\s|$)")


@dataclass(frozen=True)
class PromptSpec:
    """A prompt line's text and the settings it gives itself (None: SampleDuringTraining's)."""

    text: str
    negative: str | None = None
    width: int | None = None
    height: int | None = None
    seed: int | None = None
    cfg: float | None = None
    steps: int | None = None
    guidance: float | None = None  # the guidance a guidance-distilled model embeds (FluxGuidance's)
    references: tuple[str, ...] = ()  # reference (control) image paths
    image: str = ""  # inpainting: the image to fill ...
    mask: str = ""  # ... and its mask (white: repaint)
    edit: bool = False  # Qwen-Image-Edit: an edit instruction even without references (its edit template)

    def images(self) -> tuple[str, ...]:
        """Every image file the line names."""
        return self.references + tuple(p for p in (self.image, self.mask) if p)


def parse_prompt_line(line, number, declared, image_folder):
    """The PromptSpec of prompt line `number` (1-based); `declared` SampleDuringTraining's {name:
    Setting} bounds the numbers; relative image paths are taken from `image_folder` and each image is
    opened (None: the line's syntax and numbers alone are checked, its paths kept as written)."""
    where = f"SampleDuringTraining: prompts line {number}"
    parts = _FLAG.split(line)
    text = parts[0].strip()
    values: dict[str, Any] = {}  # {PromptSpec field: value} of the flags given
    references: list[str] = []
    given: dict[str, str] = {}  # {PromptSpec field: the flag that set it}
    if not text:
        raise EriDiffusionError(f"{where} has flags but no prompt text; write the prompt before its --flags.")
    for flag, value in zip(parts[1::2], parts[2::2]):
        name, value = _flag_name(flag, where), value.strip()
        if name in given and name != "references":
            raise EriDiffusionError(f"{where} sets {name} twice (--{given[name]} and --{flag}); keep one of them.")
        given[name] = flag
        if name in SWITCHES:
            if value:
                raise EriDiffusionError(f"{where}: --{flag} takes no value (got {value!r}); write it alone.")
            values[name] = True
            continue
        if not value:
            raise EriDiffusionError(f"{where}: --{flag} has no value; write one after it or leave the flag out.")
        if name == "references":
            references.append(_image(value, image_folder, f"{where}: --{flag}"))
        elif name in ("image", "mask"):
            values[name] = _image(value, image_folder, f"{where}: --{flag}")
        elif name == "negative":
            values[name] = value
        else:
            values[name] = _number(value, declared.get(name, GUIDANCE), f"{where}: --{flag}")
    if len(references) > MAX_REFERENCES:
        raise EriDiffusionError(f"{where} names {len(references)} references; edit models take up to {MAX_REFERENCES}.")
    if bool(values.get("image")) != bool(values.get("mask")):
        raise EriDiffusionError(f"{where}: inpainting takes both --image (the picture) and --mask (white: repaint).")
    if image_folder is not None:  # each image readable now, before any prompt is encoded
        for path in references:
            open_image_rgb(path)
        if values.get("image"):  # the mask of the image's aspect, so one crop fits both
            check_mask_fits(values["mask"], values["image"], open_image_rgb(values["image"]).size)
    return PromptSpec(text, references=tuple(references), **values)


def _flag_name(flag, where):
    """The PromptSpec field flag `flag` (the word after --) sets, or an error naming it."""
    name = FLAGS.get(flag.lower())
    if name is not None:
        return name
    written, equals, value = flag.partition("=")
    if equals and written.lower() in FLAGS:
        raise EriDiffusionError(f"{where}: --{flag}: write the value after a space (--{written} {value}).")
    raise EriDiffusionError(
        f"{where}: unknown flag --{flag}{nearest_hint(flag, FLAGS)} (flags: {', '.join('--' + f for f in FLAGS)})."
    )


def _number(text, setting, where):
    kind = setting.type
    try:
        value = kind(float(text)) if kind is int and float(text).is_integer() else kind(text)
    except ValueError:
        raise EriDiffusionError(
            f"{where} must be {'a whole number' if kind is int else 'a number'}, got {text!r}."
        ) from None
    return check_value(setting, value, where)


def _image(path, folder, where):
    path = os.path.expanduser(path)
    if folder is None:
        return path
    full = path if os.path.isabs(path) else os.path.join(folder, path)
    if not os.path.isfile(full):
        raise EriDiffusionError(f"{where}: no image file {full}; give a path relative to {folder} or an absolute one.")
    return full
