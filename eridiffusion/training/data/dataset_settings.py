"""LoadDataset's settings, declared once: the node's inputs, a config file's dataset sections and the
options a loaded Dataset carries (captions, clips, audio, held-out images) are all checked against
these declarations."""

from dataclasses import dataclass

from ...errors import EriDiffusionError
from ...settings import check_settings, setting

# LoadDataset's choices as the node shows them, and the modes load_dataset takes for them
MISSING_CAPTION_CHOICES = {"error": "error", "use trigger word": "trigger_word"}
MISSING_MASK_CHOICES = {"error": "error", "weight 1": "weight_1"}  # no mask: an error, or weight 1 everywhere
MAX_VALIDATION_FRACTION = 0.5


def check_caption_fallback(missing_caption, trigger_word):
    """The trigger word as the caption of uncaptioned images needs a trigger word (`missing_caption`:
    a mode of MISSING_CAPTION_CHOICES' values)."""
    if missing_caption == "trigger_word" and not trigger_word.strip():
        raise EriDiffusionError(
            "LoadDataset: missing_caption 'use trigger word' captions uncaptioned images with the trigger word, "
            "but trigger_word is empty; set a trigger word or set missing_caption to 'error'."
        )


@dataclass(frozen=True)
class DatasetSettings:
    """LoadDataset's inputs (and a config file's `dataset:` section)."""

    folder: str = setting(
        "my_dataset",
        "Folder of jpg/jpeg/png/webp images, mp4/webm/mov/gif clips and frame folders "
        "(a subfolder of numbered images = one clip), each with a caption file beside "
        "it (02.mp4 → 02.txt, frames folder 03/ → 03.txt). Edit pairs (Flux Kontext, Flux.2, "
        "Qwen-Image-Edit): put each target's reference image, same stem, in a control/ (or "
        "reference/) subfolder: 00.jpg ↔ control/00.png; control_2/ and control_3/ hold more "
        "references. Relative paths are inside ComfyUI's input folder.",
        path=True,
    )
    caption_ext: str = setting(".txt", "Extension of the caption file beside each image.")
    trigger_word: str = setting("", "Prepended to every caption that lacks it (empty: none).")
    missing_caption: str = setting(
        "error",
        "An image whose caption is missing or empty: stop with an error naming "
        "it, or use the trigger word as its caption.",
        choices=tuple(MISSING_CAPTION_CHOICES),
    )
    caption_dropout: float = setting(
        0.0,
        "Fraction of steps that train on an empty caption (helps prompt-free use).",
        minimum=0.0,
        maximum=1.0,
        step=0.01,
    )
    shuffle_tags: bool = setting(False, "Shuffle comma-separated tags of each caption.")
    keep_tags: int = setting(1, "Tags at the start that never move when shuffling.", minimum=0, maximum=64)
    repeats: int = setting(1, "How often each image counts per epoch.", minimum=1, maximum=1000)
    frames: int = setting(
        17,
        "Clips only: frames per training clip. Video VAEs take 4k+1 frames (Wan, "
        "HunyuanVideo: 5, 9, 17, 33, 81…) or 8k+1 (LTX-Video: 9, 17, 25…); a shorter "
        "clip is an error.",
        minimum=1,
        maximum=1025,
        step=4,
        group="media",
    )
    fps: float = setting(
        16.0,
        "Clips only: the rate frames are taken at (Wan 16, HunyuanVideo and LTX-Video "
        "24); 0 takes every stored frame. Frame folders are read frame by frame.",
        minimum=0.0,
        maximum=240.0,
        step=1.0,
        group="media",
    )
    validation: float = setting(
        0.0,
        "Fraction of the images held out of training (evenly spread over the names) to "
        "measure a validation loss on: LoRATrainer tracks it, keeps the best checkpoint and can "
        "stop early (ValidationOptions). 0: off.",
        minimum=0.0,
        maximum=MAX_VALIDATION_FRACTION,
        step=0.05,
        optional=True,
    )
    missing_mask: str = setting(
        "error",
        "With a masks/ subfolder (a greyscale mask per image, same stem: white = learn, "
        "black = ignore, grey = in between; TrainingExtras' mask_min sets the floor): an image "
        "without a mask stops with an error naming it, or trains with weight 1 everywhere.",
        choices=tuple(MISSING_MASK_CHOICES),
        optional=True,
    )
    flip: bool = setting(
        False,
        "Also train on every image mirrored left to right (twice the images; masks and "
        "reference images are mirrored with them). Leave off for asymmetric subjects (text, logos).",
        optional=True,
    )
    # last: a saved workflow lists its widgets in order, so a new one goes after the others
    seconds: float = setting(
        120.0,
        "Audio files only (ACE-Step 1.5): seconds trained from each file's start; a shorter file is "
        "padded with silence to it. Captions: tags in 00.txt, lyrics in 00.lyrics.txt, bpm/key in 00.json.",
        minimum=1.0,
        maximum=600.0,
        step=1.0,
        optional=True,
        group="media",
    )

    def __post_init__(self):
        check_settings(self, "LoadDataset")
        check_caption_fallback(MISSING_CAPTION_CHOICES[self.missing_caption], self.trigger_word)
