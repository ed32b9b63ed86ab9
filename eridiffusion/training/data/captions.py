"""Captions: the trigger word put in front, caption dropout and tag shuffling, and the caption
variants an image trains on."""

import random
import re
from dataclasses import dataclass

from ...errors import EriDiffusionError
from ...settings import check_declared
from .dataset_settings import DatasetSettings


@dataclass(frozen=True)
class CaptionOptions:
    trigger_word: str = ""
    dropout_rate: float = 0.0  # the trainer swaps in an empty caption with this probability
    shuffle_tags: bool = False
    keep_tags: int = 1  # leading tags that shuffling leaves in place (the trigger word among them)

    def __post_init__(self):
        if not isinstance(self.trigger_word, str):
            raise EriDiffusionError(
                f"trigger_word must be text, got {self.trigger_word!r}; give a word such as 'sks' or leave it empty."
            )
        if self.trigger_word != self.trigger_word.strip():
            raise EriDiffusionError(f"trigger_word {self.trigger_word!r} has surrounding spaces; remove them.")
        check_declared(DatasetSettings, "LoadDataset", caption_dropout=self.dropout_rate, keep_tags=self.keep_tags)


def caption_variants(caption, options, count, seed):
    """Up to `count` captions to train on for one image: the caption itself first, then seeded tag
    shuffles (comma-separated tags, the first keep_tags left in place). Without shuffle_tags there
    is nothing to vary, so the answer is just [caption]. Shuffles may repeat when there are few tags."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise EriDiffusionError(
            f"caption variant count {count!r} must be a whole number >= 1; ask for at least the caption itself."
        )
    if not options.shuffle_tags:
        return [caption]
    tags = [tag.strip() for tag in caption.split(",") if tag.strip()]
    kept, movable = tags[: options.keep_tags], tags[options.keep_tags :]
    rng = random.Random(seed)
    variants = [caption]
    for _ in range(count - 1):
        shuffled = list(movable)
        rng.shuffle(shuffled)
        variants.append(", ".join(kept + shuffled))
    return variants


def with_trigger(caption, trigger_word):
    if not trigger_word:
        return caption
    if re.search(rf"(?<!\w){re.escape(trigger_word)}(?!\w)", caption, flags=re.IGNORECASE):
        return caption
    return f"{trigger_word}, {caption}"
