"""The loss curve as a picture: raw losses faint, an exponential moving average on top."""

import os
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

WIDTH, HEIGHT, MARGIN = 640, 360, 48


@dataclass(frozen=True)
class LossHistory:
    """A finished run's losses (LoRATrainer's LOSS output)."""

    losses: tuple[float, ...]
    eval_loss_before: float
    eval_loss_after: float
    seconds_per_step: float
    run_dir: str
    validation: tuple[tuple[int, float], ...] = ()  # ((step, validation loss), ...)
    best_step: int | None = None  # the step of the lowest validation loss

    @classmethod
    def of(cls, result):
        """The LOSS of a TrainResult."""
        return cls(
            tuple(result.losses),
            result.eval_loss_before,
            result.eval_loss_after,
            result.seconds_per_step,
            os.path.abspath(result.run_dir),
            tuple(tuple(point) for point in result.validation),
            result.best["step"] if result.best else None,
        )


def smoothed(values, weight=0.9):
    """Debiased exponential moving average (TensorBoard's smoothing)."""
    out, avg = [], 0.0
    for i, v in enumerate(values, start=1):
        avg = weight * avg + (1 - weight) * v
        out.append(avg / (1 - weight**i))
    return out


VALIDATION_COLOR = (220, 110, 20)


def draw_loss_plot(losses, title="training loss", validation=()):
    """An RGB PIL image of `losses` against step, and of the `validation` points ((step, loss), ...)
    on the same axes, with a legend when there are both."""
    image = Image.new("RGB", (WIDTH, HEIGHT), "white")
    draw = ImageDraw.Draw(image)
    left, top, right, bottom = MARGIN, MARGIN // 2, WIDTH - MARGIN // 2, HEIGHT - MARGIN
    draw.rectangle([left, top, right, bottom], outline="black")
    draw.text((left, 4), title, fill="black")
    steps = len(losses)
    # skipped (non-finite) steps have no point
    finite = [(i + 1, v) for i, v in enumerate(losses) if v is not None and np.isfinite(v)]
    checks = [(step, v) for step, v in validation if v is not None and np.isfinite(v)]
    if not finite and not checks:
        draw.text((left + 8, top + 8), "no loss recorded", fill="black")
        return image
    values = [v for _, v in finite + checks]
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    last_step = max([steps] + [step for step, _ in checks])

    def point(step, v):
        x = left + (right - left) * ((step - 1) / max(1, last_step - 1))
        return x, bottom - (bottom - top) * ((v - low) / span)

    def line(points, color, width):
        xy = [point(step, v) for step, v in points]
        draw.line(xy if len(xy) > 1 else xy * 2, fill=color, width=width)

    if finite:
        line(finite, (170, 190, 230), 1)
        line([(step, v) for (step, _), v in zip(finite, smoothed([v for _, v in finite]))], (20, 60, 200), 2)
    if checks:
        line(checks, VALIDATION_COLOR, 2)
        for step, v in checks:
            x, y = point(step, v)
            draw.ellipse([x - 3, y - 3, x + 3, y + 3], fill=VALIDATION_COLOR)
        draw.line([right - 150, top + 10, right - 130, top + 10], fill=(20, 60, 200), width=2)
        draw.text((right - 125, top + 4), "training", fill="black")
        draw.line([right - 150, top + 24, right - 130, top + 24], fill=VALIDATION_COLOR, width=2)
        draw.text((right - 125, top + 18), "validation", fill="black")
    draw.text((4, top), f"{high:.4g}", fill="black")
    draw.text((4, bottom - 10), f"{low:.4g}", fill="black")
    draw.text((left, bottom + 6), "step 1", fill="black")
    draw.text((right - 60, bottom + 6), f"step {last_step}", fill="black")
    return image


def as_image_tensor(picture):
    """A PIL picture as a ComfyUI IMAGE batch (1, H, W, 3) in [0, 1]."""
    import torch

    return torch.from_numpy(np.asarray(picture.convert("RGB"), dtype=np.float32) / 255.0)[None]
