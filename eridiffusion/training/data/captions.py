"""Captions: the trigger word put in front, caption dropout and tag shuffling, and the caption
variants an image trains on."""

import random
import re
from dataclasses import dataclass

from ...errors import EriDiffusionError


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
        if not isinstance(self.dropout_rate, (int, float)) or not 0.0 <= self.dropout_rate <= 1.0:
            raise EriDiffusionError(
                f"caption dropout {self.dropout_rate} is outside 0..1; set a probability such as 0.05 (0 turns it off)."
            )
        if isinstance(self.keep_tags, bool) or not isinstance(self.keep_tags, int) or self.keep_tags < 0:
            raise EriDiffusionError(
                f"keep_tags {self.keep_tags!r} must be a whole number >= 0; "
                "set how many leading tags stay in place when shuffling (usually 1)."
            )


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
