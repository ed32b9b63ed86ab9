"""The loss curve as a picture: raw losses faint, an exponential moving average on top."""

from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

WIDTH, HEIGHT, MARGIN = 640, 360, 48


@dataclass(frozen=True)
class LossHistory:
    """A finished run's losses (LoRATrainer's LOSS output)."""

    losses: tuple
    eval_loss_before: float
    eval_loss_after: float
    seconds_per_step: float
    run_dir: str


def smoothed(values, weight=0.9):
    """Debiased exponential moving average (TensorBoard's smoothing)."""
    out, avg = [], 0.0
    for i, v in enumerate(values, start=1):
        avg = weight * avg + (1 - weight) * v
        out.append(avg / (1 - weight**i))
    return out


def draw_loss_plot(losses, title="training loss"):
    """An RGB PIL image of `losses` against step."""
    image = Image.new("RGB", (WIDTH, HEIGHT), "white")
    draw = ImageDraw.Draw(image)
    left, top, right, bottom = MARGIN, MARGIN // 2, WIDTH - MARGIN // 2, HEIGHT - MARGIN
    draw.rectangle([left, top, right, bottom], outline="black")
    draw.text((left, 4), title, fill="black")
    steps = len(losses)
    losses = [v for v in losses if v is not None and np.isfinite(v)]  # skipped (non-finite) steps have no point
    if not losses:
        draw.text((left + 8, top + 8), "no loss recorded", fill="black")
        return image
    low, high = min(losses), max(losses)
    span = (high - low) or 1.0

    def point(i, v):
        x = left + (right - left) * (i / max(1, len(losses) - 1))
        return x, bottom - (bottom - top) * ((v - low) / span)

    draw.line(
        [point(i, v) for i, v in enumerate(losses)] if len(losses) > 1 else [point(0, losses[0])] * 2,
        fill=(170, 190, 230),
        width=1,
    )
    draw.line(
        [point(i, v) for i, v in enumerate(smoothed(losses))] if len(losses) > 1 else [point(0, losses[0])] * 2,
        fill=(20, 60, 200),
        width=2,
    )
    draw.text((4, top), f"{high:.4g}", fill="black")
    draw.text((4, bottom - 10), f"{low:.4g}", fill="black")
    draw.text((left, bottom + 6), "step 1", fill="black")
    draw.text((right - 60, bottom + 6), f"step {steps}", fill="black")
    return image


def as_image_tensor(picture):
    """A PIL picture as a ComfyUI IMAGE batch (1, H, W, 3) in [0, 1]."""
    import torch

    return torch.from_numpy(np.asarray(picture.convert("RGB"), dtype=np.float32) / 255.0)[None]
