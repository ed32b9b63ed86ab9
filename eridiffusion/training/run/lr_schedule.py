"""The learning-rate schedule: linear warmup, then constant or cosine decay to zero."""

import math


def lr_factor(config):
    """The factor on the peak learning rate at each step (a LambdaLR function)."""

    def factor(step):
        if step < config.warmup_steps:
            return (step + 1) / config.warmup_steps
        if config.lr_schedule == "cosine":
            progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
            return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
        return 1.0

    return factor
