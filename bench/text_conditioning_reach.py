"""How far a tiny stack's diffusion model listens to its text conditioning (issue 48): the relative
change of its prediction on a fixed noisy latent (devkit.stock_comfyui.ProbeInput, 40% of the way from
noise) when the text conditioning the model receives (`c_crossattn`, and the pooled `y` where the
family has one) is replaced by zeros, or by random values at 3x its spread. A text encoder trained
alone can move the training loss at most as far as its conditioning moves the prediction: where the
whole conditioning swapped for another moves it by 0.1%, no encoder lowers the loss by 30%.

    python bench/text_conditioning_reach.py                  # the families of the text-encoder tests
    FAMILIES=z_image,sdxl python bench/text_conditioning_reach.py
Prints one `RESULT {json}` line per family and writes $OUT/text_conditioning_reach.json (or
bench/results/<date>_text_conditioning_reach_cpu.json).
"""

import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

FAMILIES = os.environ.get("FAMILIES", "flux_dev,wan21_t2v,qwen_image,z_image,flux2,ltx2,sdxl").split(",")
TEXT_INPUTS = ("c_crossattn", "y")


def reach(name, folder):
    import torch

    from devkit.photo_clips import write_dog_clips
    from devkit.stock_comfyui import ProbeInput
    from devkit.tiny_models import TINY_FAMILIES, build_tiny
    from eridiffusion.training.data.dataset import load_dataset
    from eridiffusion.training.data.training_data import build_training_data

    family = TINY_FAMILIES[name]
    photos = os.path.join(ROOT, "demo", "data", "dreambooth_dog")
    if family.video_frames:
        clips = write_dog_clips(photos, os.path.join(folder, "clips"))
        dataset = load_dataset(clips, frames=family.video_frames, fps=16.0)
    else:
        dataset = load_dataset(photos)
    model, clip, vae = build_tiny(name, seed=0)
    with torch.inference_mode():
        data = build_training_data(dataset, vae, clip, family.resolution, os.path.join(folder, f"cache_{name}"))
    probe = ProbeInput.of(model, data)
    base = probe.output(model)
    row = {"family": name, "text_inputs": {k: list(probe.inputs[k].shape) for k in TEXT_INPUTS if k in probe.inputs}}
    for label, scale in (("zeros", 0.0), ("random_3x", 3.0)):
        generator = torch.Generator().manual_seed(1)
        inputs = dict(probe.inputs)
        for key in row["text_inputs"]:
            value = probe.inputs[key].float()
            swapped = torch.randn(value.shape, generator=generator) * value.std() * scale
            inputs[key] = swapped.to(probe.inputs[key].dtype)
        out = ProbeInput(probe.x, probe.sigma, inputs).output(model)
        row[f"prediction_change_{label}"] = ((out - base).norm() / base.norm()).item()
    return row


def main():
    from eridiffusion.runtime import start_host_in_temp_dir

    start_host_in_temp_dir("eridiffusion-reach-")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name in FAMILIES:
            rows.append(reach(name, folder))
            print("RESULT " + json.dumps(rows[-1]), flush=True)
    out = os.environ.get("OUT") or os.path.join(ROOT, "bench", "results")
    name = (
        "text_conditioning_reach.json"
        if os.environ.get("OUT")
        else time.strftime("%Y-%m-%d_text_conditioning_reach_cpu.json")
    )
    with open(os.path.join(out, name), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
