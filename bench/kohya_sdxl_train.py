"""kohya sd-scripts' SDXL full fine-tune (its sdxl_train.py) on the work of bench/train_speed.py's
ours_sdxl_ckpt_full_alllinear_adafactor_fused_bf16copies row, for a side-by-side on the same machine (issue 47):
the full-size SDXL UNet with random weights (train_speed's file, ComfyUI's keys, which are the
SAI checkpoint's UNet keys), 1024², batch 1, bf16 weights (--full_bf16, --mixed_precision bf16), the fused
backward pass (--fused_backward_pass: each tensor stepped by Adafactor as its gradient completes, clipped per
tensor to max_grad_norm 1), Adafactor with relative_step=False scale_parameter=False warmup_init=False
weight_decay=0.01 (ours: optimizers.py's fixed-lr Adafactor with TrainConfig's weight decay), lr 1e-5
(LR; train_speed's rows use 1e-4, which changes no step's work), a constant schedule, gradient
checkpointing, SDPA, the UNet alone trained (the text encoders frozen, their outputs cached), seed 0.
kohya trains every UNet tensor (2.57 billion values, its only full fine-tune); ours_..._full_alllinear trains
the Linear layers' weights (the log's 'number of trainable parameters' and the record's trainable_parameters
say how many each trained).

sdxl_train.py loads one single-file SAI checkpoint: this writes one (bf16, random) into the temp folder once
per machine, in a process with kohya's packages: the UNet from train_speed.weights_file("sdxl") under
model.diffusion_model. (its keys and shapes are checked against kohya's SdxlUNet2DConditionModel first), and
random CLIP-L (conditioner.embedders.0.transformer.), OpenCLIP bigG (conditioner.embedders.1.model., converted
to that layout by kohya's own convert_text_encoder_2_state_dict_to_sdxl) and VAE (first_stage_model., by
kohya's convert_vae_state_dict of diffusers' AutoencoderKL under kohya's create_vae_diffusers_config), each
tensor streamed to the file as it is drawn. It trains from its disk caches: one black 1024² PNG with its
caption, its latents (<image>_1024x1024_sdxl.npz: latents (4, 128, 128), original_size, crop_ltrb, which
kohya's SdSdxlLatentsCachingStrategy accepts when the key latents is there) and its text encoders' outputs
(<image>_te_outputs.npz: hidden_state1 (77, 768), hidden_state2 (77, 1280), pool2 (1280,), as
SdxlTextEncoderOutputsCachingStrategy checks them), so the VAE and the text encoders never run, and a
dataset TOML that repeats the image STEPS + 2 times (one epoch holds every step). The tokenizers kohya
loads at its start come from --tokenizer_cache_dir, filled from ComfyUI's CLIP tokenizer files
($COMFYUI_PATH/comfy/sd1_tokenizer; the machine reaches no hub).

Each experiment runs sdxl_train.py as a process of its own (runpy). Inside it, before kohya's code runs, the
GPU memory may be capped (capN) and kohya's own per-step hook is wrapped: sdxl_train calls
sdxl_train_util.sample_images once before the first step (epoch 0, step 0: training starts; the peak
memory is reset there) and after every optimizer step (epoch None), where the wrapper synchronizes the
device and takes the time and torch.cuda.max_memory_allocated. s/step is the median of the step intervals
after WARMUP steps; kohya's progress bar's s/it is kept beside it as a check. The final save of the
7 GB model (save_sd_model_on_train_end, after every step) is skipped. Prints `RESULT {json}` per
experiment and writes $OUT/kohya_sdxl_train.json (each experiment's output in
$OUT/kohya_sdxl_train_<exp>.log).

Experiments (PLAN, comma-separated, parts joined by _): fused (--fused_backward_pass), adafactor (the
optimizer; always), nockpt (no --gradient_checkpointing), capN (the process may use N GiB), resN (N² images,
default 1024). STEPS (14) and WARMUP (4) set the steps; TIMEOUT_S (480) stops one experiment; LR (1e-5).

sd-scripts and the packages it needs beyond the GPU machine's image travel in the git-ignored .kohya/
(about 20 MB): its source from the fetch tool's bare mirror, and wheels that this script installs into a
folder of its own, put before the image's packages only in kohya's processes. They are its
requirements.txt's pins where the image's differ: sd-scripts imports names that transformers 5 removed
(CLIPFeatureExtractor in library/lpw_stable_diffusion.py) and diffusers 0.32 names that transformers 5
and huggingface_hub 1 removed, so transformers 4.54.1 with tokenizers 0.21 and huggingface_hub 0.34.3,
and diffusers 0.32.1; and what the image lacks: voluptuous, imagesize, toml, ftfy (wcwidth). The image's
accelerate, opencv-python-headless, einops, safetensors, numpy, Pillow and torch serve as they are. Here,
once, in the repository root:

    K=/work/.mirror/kohya-ss+sd-scripts/repo
    git --git-dir=$K archive --format=tar --prefix=.kohya/ HEAD library sdxl_train.py requirements.txt \\
        LICENSE.md | tar -x
    git --git-dir=$K rev-parse HEAD > .kohya/COMMIT
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \\
        --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \\
        --platform any -d .kohya/wheels transformers==4.54.1 tokenizers==0.21.4 huggingface-hub==0.34.3 \\
        diffusers==0.32.1 voluptuous==0.15.2 imagesize==1.4.1 toml==0.10.2 ftfy==6.3.1 wcwidth==0.2.13

On the GPU machine (carry .whl and .kohya; ComfyUI is needed to write the UNet file, once per machine,
unless an earlier benchmark left it in the temp folder, and for the tokenizer files):

    KOHYA=.kohya PLAN=fused_adafactor bash bench/gpu_host.sh python3 bench/kohya_sdxl_train.py
"""

import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import peer_runs  # noqa: E402

RESOLUTION, LATENT_CHANNELS = 1024, 4
TOKENS, CLIP_L_WIDTH, CLIP_G_WIDTH = 77, 768, 1280  # SDXL's text encoders' outputs: 77 x (768 + 1280), pooled 1280
DEFAULT_PLAN = "fused_adafactor"
CHECKPOINT_NAME = "eridiffusion_bench_sdxl_sai.safetensors"
# What sd-scripts imports beyond what the GPU machine's image holds on sdxl_train.py's path (module level)
KOHYA_NEEDS = (
    "diffusers transformers tokenizers huggingface_hub accelerate safetensors toml voluptuous imagesize ftfy cv2"
    " einops PIL numpy tqdm"
).split()


def kohya_paths(root):
    """(the folder holding sdxl_train.py and library/, the commit it was exported at) of a KOHYA tree."""
    if not os.path.isfile(os.path.join(root, "sdxl_train.py")) or not os.path.isdir(os.path.join(root, "library")):
        raise SystemExit(
            f"KOHYA={root}: no sdxl_train.py and library/ there; export sd-scripts' tree as this file's "
            "docstring says and carry it"
        )
    return root, peer_runs.exported_commit(root)


def kohya_env(paths):
    return dict(
        os.environ,
        PYTHONUNBUFFERED="1",
        PYTHONDONTWRITEBYTECODE="1",  # (no __pycache__ in the carried .kohya/)
        HF_HUB_OFFLINE="1",  # nothing here needs the hub; the GPU machine cannot reach it
        TRANSFORMERS_OFFLINE="1",
        PYTHONPATH=os.pathsep.join([*paths, *filter(None, [os.environ.get("PYTHONPATH")])]),
    )


def checkpoint_file(unet_path, paths):
    """The SAI single-file checkpoint sdxl_train.py loads, written once per machine in a process with kohya's
    packages (write_checkpoint)."""
    path = os.path.join(tempfile.gettempdir(), CHECKPOINT_NAME)
    if not os.path.exists(path):
        command = [sys.executable, os.path.abspath(__file__), "--write-checkpoint", unet_path, path]
        subprocess.run(command, env=kohya_env(paths), check=True)
    return path


def write_safetensors(path, entries, metadata=None):
    """A safetensors file of `entries` (name, shape, dtype, a function giving the tensor), each tensor made
    and written in turn, so that the file's tensors are never all in memory at once."""
    import torch

    names = {torch.bfloat16: "BF16", torch.float32: "F32", torch.float16: "F16", torch.int64: "I64"}
    header, offset = {}, 0
    for name, shape, dtype, _ in entries:
        size = math.prod(shape) * dtype.itemsize
        header[name] = {"dtype": names[dtype], "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    if metadata:
        header["__metadata__"] = metadata
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for name, shape, dtype, make in entries:
            tensor = make().to(dtype).contiguous()
            if tuple(tensor.shape) != tuple(shape):
                raise ValueError(f"{name}: made {tuple(tensor.shape)}, expected {tuple(shape)}")
            f.write(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    os.replace(path + ".tmp", path)


def write_checkpoint(unet_path, path):
    """In a process with kohya's packages: the SAI checkpoint of the random UNet file and random text encoders
    and VAE, in the layout kohya's sdxl_model_util.load_models_from_sdxl_checkpoint reads (this file's
    docstring); bf16."""
    import torch
    from accelerate import init_empty_weights
    from diffusers import AutoencoderKL
    from library import model_util, sdxl_model_util, sdxl_original_unet
    from safetensors import safe_open
    from transformers import CLIPTextModel, CLIPTextModelWithProjection

    with init_empty_weights():
        unet = sdxl_original_unet.SdxlUNet2DConditionModel()
    expected = {k: tuple(v.shape) for k, v in unet.state_dict().items()}
    unet_file = safe_open(unet_path, framework="pt")
    found = {k: tuple(unet_file.get_slice(k).get_shape()) for k in unet_file.keys()}
    if found != expected:
        wrong = sorted(k for k in set(found) | set(expected) if found.get(k) != expected.get(k))
        raise SystemExit(
            f"{unet_path}: {len(wrong)} keys differ from kohya's SdxlUNet2DConditionModel: "
            + ", ".join(f"{k} {found.get(k)} vs {expected.get(k)}" for k in wrong[:8])
        )
    entries = [
        (f"model.diffusion_model.{k}", shape, torch.bfloat16, lambda k=k: unet_file.get_tensor(k))
        for k, shape in sorted(found.items())
    ]

    # CLIP-L and OpenCLIP bigG's text towers (the shapes their checkpoints have), VAE as kohya configures it
    clip_l = clip_text_config(CLIP_L_WIDTH, layers=12, heads=12)
    clip_g = clip_text_config(CLIP_G_WIDTH, layers=32, heads=20, hidden_act="gelu")
    with init_empty_weights():
        text_l = CLIPTextModel._from_config(clip_l)
        text_g = CLIPTextModelWithProjection(clip_g)
        vae = AutoencoderKL(**model_util.create_vae_diffusers_config())
    logit_scale = torch.empty((), device="meta")
    random_parts = {
        "conditioner.embedders.0.transformer.": text_l.state_dict(),
        "conditioner.embedders.1.model.": sdxl_model_util.convert_text_encoder_2_state_dict_to_sdxl(
            text_g.state_dict(), logit_scale
        ),
        "first_stage_model.": model_util.convert_vae_state_dict(vae.state_dict()),
    }
    generator = torch.Generator().manual_seed(3)

    def draw(name, shape, integer):
        if integer:  # (a position-id buffer) its positions
            return torch.arange(shape[-1]).expand(shape)
        if len(shape) >= 2:
            return torch.randn(shape, generator=generator) * 0.02
        if name.endswith("weight") and ("norm" in name or ".ln_" in name or "ln_final" in name):
            return torch.ones(shape)
        return torch.randn(shape, generator=generator) * 0.01

    for prefix, state in random_parts.items():
        for k, v in sorted(state.items()):
            integer = not v.dtype.is_floating_point
            dtype = torch.int64 if integer else torch.bfloat16
            name, shape = prefix + k, tuple(v.shape)
            entries.append((name, shape, dtype, lambda name=name, shape=shape, i=integer: draw(name, shape, i)))
    write_safetensors(path, entries, {"eridiffusion_bench": "random SDXL, SAI layout, UNet from " + unet_path})
    print(f"wrote {path}: {len(entries)} tensors, {os.path.getsize(path) / 2**30:.2f} GiB", flush=True)


def clip_text_config(width, layers, heads, **options):
    """A CLIP text tower's transformers config as SDXL's checkpoints have it: its MLP 4 times as wide as the tower,
    its projection as wide, CLIP's vocabulary over TOKENS positions."""
    from transformers import CLIPTextConfig

    return CLIPTextConfig(
        hidden_size=width,
        intermediate_size=4 * width,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        projection_dim=width,
        vocab_size=49408,
        max_position_embeddings=TOKENS,
        **options,
    )


def tokenizer_cache(folder):
    """kohya's --tokenizer_cache_dir: its two CLIP tokenizers (openai/clip-vit-large-patch14 and
    laion/CLIP-ViT-bigG-14-laion2B-39B-b160k, by kohya's names for their folders) from ComfyUI's CLIP tokenizer
    files, which hold the same vocabulary (bigG's pads with 0, which kohya sets itself)."""
    source = os.path.join(os.environ.get("COMFYUI_PATH", ""), "comfy", "sd1_tokenizer")
    if not os.path.isfile(os.path.join(source, "vocab.json")):
        raise SystemExit(f"no CLIP tokenizer at {source}: set COMFYUI_PATH (bench/gpu_host.sh does)")
    cache = os.path.join(folder, "tokenizers")
    for name in ("openai/clip-vit-large-patch14", "laion/CLIP-ViT-bigG-14-laion2B-39B-b160k"):
        shutil.copytree(source, os.path.join(cache, name.replace("/", "_")), dirs_exist_ok=True)
    return cache


def write_dataset(folder, resolution=RESOLUTION, repeats=1):
    """One image's caches in kohya's disk format (this file's docstring) beside a black PNG of its size and its
    caption, and the dataset TOML over them, the image repeated `repeats` times per epoch. Returns the TOML's
    path."""
    import numpy as np
    from PIL import Image

    images = os.path.join(folder, "images")
    os.makedirs(images, exist_ok=True)
    stem = os.path.join(images, "bench")
    Image.new("RGB", (resolution, resolution)).save(stem + ".png")
    with open(stem + ".txt", "w") as f:
        f.write("a random image")
    rng = np.random.default_rng(0)
    side = resolution // 8
    np.savez(
        f"{stem}_{resolution:04d}x{resolution:04d}_sdxl.npz",  # SdSdxlLatentsCachingStrategy's name: _WxH_sdxl
        latents=rng.standard_normal((LATENT_CHANNELS, side, side), dtype=np.float32),
        original_size=np.array([resolution, resolution]),
        crop_ltrb=np.array([0, 0, resolution, resolution]),
    )
    np.savez(
        stem + "_te_outputs.npz",
        hidden_state1=rng.standard_normal((TOKENS, CLIP_L_WIDTH), dtype=np.float32) * 0.5,
        hidden_state2=rng.standard_normal((TOKENS, CLIP_G_WIDTH), dtype=np.float32) * 0.5,
        pool2=rng.standard_normal((CLIP_G_WIDTH,), dtype=np.float32) * 0.5,
    )
    toml_path = os.path.join(folder, "dataset.toml")
    with open(toml_path, "w") as f:
        f.write(
            "[general]\n"
            "enable_bucket = false\n"
            'caption_extension = ".txt"\n\n'
            "[[datasets]]\n"
            f"resolution = {resolution}\n"
            "batch_size = 1\n\n"
            "  [[datasets.subsets]]\n"
            f'  image_dir = "{images}"\n'
            f"  num_repeats = {repeats}\n"
        )
    return toml_path


def kohya_argv(checkpoint, dataset_toml, tokenizers, output_dir, steps, fused=True, checkpointing=True, lr=1e-5):
    """sdxl_train.py's arguments for this work."""
    options = {
        "pretrained_model_name_or_path": checkpoint,
        "dataset_config": dataset_toml,
        "tokenizer_cache_dir": tokenizers,
        "output_dir": output_dir,
        "output_name": "kohya_bench",
        "save_model_as": "safetensors",
        "mixed_precision": "bf16",
        "full_bf16": True,
        "fused_backward_pass": fused,
        "optimizer_type": "adafactor",
        "learning_rate": lr,
        "lr_scheduler": "constant",
        "max_grad_norm": 1.0,
        "gradient_checkpointing": checkpointing,
        "sdpa": True,
        "cache_latents": True,
        "cache_latents_to_disk": True,
        "cache_text_encoder_outputs": True,
        "cache_text_encoder_outputs_to_disk": True,
        "max_train_steps": steps,
        "seed": 0,
        "max_data_loader_n_workers": 2,
        "persistent_data_loader_workers": True,
    }
    # (nargs="*": last)
    return peer_runs.command_line(options) + [
        "--optimizer_args",
        "relative_step=False",
        "scale_parameter=False",
        "warmup_init=False",
        "weight_decay=0.01",
    ]


def run_in_kohya(cap_gib, record_path, argv):
    """In kohya's own process: cap the GPU's memory, time kohya's steps through its per-step hook, skip its final
    save, run its sdxl_train.py."""
    import runpy

    record = peer_runs.StepRecord(record_path, cap_gib)
    import library.sdxl_train_util as sdxl_train_util

    sample_images = sdxl_train_util.sample_images

    def timed_sample_images(accelerator, args, epoch, steps, *rest, **kwargs):
        out = sample_images(accelerator, args, epoch, steps, *rest, **kwargs)
        if epoch == 0 and steps == 0:  # before the first step (--sample_at_first's call)
            record.training_started(allocated=True)
        elif epoch is None:  # after each optimizer step
            record.step_ended()
        return out

    def skip_final_save(*args, **kwargs):
        record.note(final_save_skipped=True)

    sdxl_train_util.sample_images = timed_sample_images
    sdxl_train_util.save_sd_model_on_train_end = skip_final_save
    script = os.path.join(os.path.dirname(os.path.abspath(sdxl_train_util.__file__)), "..", "sdxl_train.py")
    sys.argv = ["sdxl_train.py", *argv]
    runpy.run_path(os.path.normpath(script), run_name="__main__")


def experiment(name):
    """An experiment's memory cap in GiB (None: uncapped), resolution and sdxl_train options (this file's
    docstring)."""
    parts = name.split("_")
    number = lambda prefix, kind: peer_runs.experiment_number(parts, prefix, kind)
    return (
        number("cap", float),
        number("res", int) or RESOLUTION,
        {"fused": "fused" in parts, "checkpointing": "nockpt" not in parts},
    )


def run_experiment(name, checkpoint, folder, paths, steps, warmup, timeout_s, out_dir, lr):
    """kohya's training under one experiment's settings, in a process of its own; its figures."""
    cap, resolution, options = experiment(name)
    record_path = os.path.join(folder, f"{name}.json")
    data = os.path.join(folder, f"data_{resolution}")
    dataset_toml = write_dataset(data, resolution, repeats=steps + 2)
    tokenizers = tokenizer_cache(folder)
    argv = kohya_argv(checkpoint, dataset_toml, tokenizers, os.path.join(folder, "output"), steps, lr=lr, **options)
    command = [sys.executable, os.path.abspath(__file__), "--in-kohya", str(cap or 0), record_path, "--", *argv]
    log_path = os.path.join(out_dir, f"kohya_sdxl_train_{name}.log")
    run = peer_runs.run_peer(command, kohya_env(paths), folder, log_path, timeout_s, record_path)
    trainable = re.findall(r"number of trainable parameters: (\d+)", run.log)
    losses = re.findall(r"avr_loss=(\S+?)\]", run.log)  # the progress bar's moving average of the losses
    return {
        "exp": name,
        "trainer": "kohya sd-scripts sdxl_train.py",
        "model": "sdxl",
        "grad_ckpt": options["checkpointing"],
        "fused_backward": options["fused"],
        "optimizer": "Adafactor",
        "resolution": resolution,
        "batch": 1,
        "full_bf16": True,
        "memory_cap_GiB": cap,
        "trainable_parameters": int(trainable[-1]) if trainable else None,
        **run.measured(),
        "allocated_at_start_GiB": run.record.get("allocated_at_start_GiB"),
        "avr_loss_first_last": [float(losses[0]), float(losses[-1])] if losses else None,
        "final_save_skipped": run.record.get("final_save_skipped", False),
        "wall_s": run.wall_s,
        "log": os.path.basename(log_path),
        **run.speed(warmup, "images_per_s"),
    }


def main():
    kohya_root = peer_runs.peer_root("KOHYA", "sd-scripts")
    src, commit = kohya_paths(kohya_root)
    site = peer_runs.peer_site(kohya_root, "kohya")
    paths = [*([site] if site else []), src]
    peer_runs.check_imports(paths, KOHYA_NEEDS, "sd-scripts", "KOHYA")
    plan, steps, warmup, timeout_s, out_dir = peer_runs.plan_settings(DEFAULT_PLAN, default_timeout_s=480)
    lr = float(os.environ.get("LR", "1e-5"))
    started = time.time()
    checkpoint = checkpoint_file(peer_runs.random_weights_file("sdxl"), paths)
    setup_s = round(time.time() - started, 1)

    import torch

    header = {
        "date": time.strftime("%Y-%m-%d"),
        "torch": torch.__version__,
        "kohya_commit": commit,
        "commit": os.environ.get("COMMIT"),
        "checkpoint": checkpoint,
        "checkpoint_setup_s": setup_s,
        "steps": steps,
        "warmup": warmup,
        "learning_rate": lr,
    }
    results = []
    with tempfile.TemporaryDirectory(prefix="kohya-bench-") as folder:
        for name in plan:
            r = run_experiment(name, checkpoint, folder, paths, steps, warmup, timeout_s, out_dir, lr)
            r["kohya_commit"] = commit
            peer_runs.report(r, results, header, os.path.join(out_dir, "kohya_sdxl_train.json"))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--in-kohya"]:  # the process run_experiment starts: cap GiB, record file, --, kohya's argv
        run_in_kohya(float(sys.argv[2]) or None, sys.argv[3], sys.argv[5:])
    elif sys.argv[1:2] == ["--write-checkpoint"]:  # checkpoint_file's process: the UNet file, the checkpoint
        write_checkpoint(sys.argv[2], sys.argv[3])
    else:
        main()
