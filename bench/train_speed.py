"""EriDiffusion's trainer against ComfyUI's built-in TrainLoraNode, side by side in one process,
on full-size architectures with random weights (nothing downloaded): bf16, by default 1024², batch 1,
rank 16 (any experiment's _resN, _bsN, _rankN change them: the scaling table; _tokN the text tokens, e.g.
_tok256 for Flux.1 as a graph trains it: ComfyUI's T5 tokenizer pads its prompts to 256, SHAPES gives 512).
The random weights are saved to a file once and every experiment loads them with ComfyUI's
UNETLoader code (comfy.sd.load_diffusion_model), as a user's graph does; on a host with dynamic
VRAM (ComfyUI 0.2x on NVIDIA) that is switched on as ComfyUI's server does by default
(DYNAMIC_VRAM=0 turns it off).

Every row reports its model FLOPs utilisation (mfu): the FLOPs of one training step of that work
(model, resolution, batch, rank, adapter targets, trained text encoders), counted once with
torch.utils.flop_counter over an eager step without checkpointing (the model's FLOPs: no recompute,
frozen weights get no weight gradient), divided by the row's s/step and the GPU's dense bf16 peak
(DENSE_BF16_PEAK; the built-in's rows take the FLOPs of our step of the same work).

Ours is timed with CUDA events at each optimizer step (median over the steps after warm-up);
the built-in, which offers no per-step hook, with CUDA events at each of its optimizer's steps. Peak memory is
torch.cuda.max_memory_allocated over the training steps. Prints one `RESULT {json}` line per
experiment and writes $OUT/train_speed.json.

    COMFYUI_PATH=... PLAN=ours_sdxl_ckpt,builtin_sdxl_ckpt python bench/train_speed.py
Experiments: builtin_<model>_<ckpt|nockpt> with the built-in's own flags where the host has them:
_bypass (bypass_mode), _qbwd (quantized_backward), _offload (offloading), _depthN (checkpoint_depth);
and ours_<model>_<ckpt|nockpt> with flags: _graphs (CUDA
graphs on; else off), _alllinear (targets; else attention for SDXL, the family default for Flux),
_fp8 (float8_e4m3fn base weights, as UNETLoader's weight_dtype), _nf4 / _int8 (MemoryOptions'
base_quantization: the frozen linears held in bitsandbytes' NF4 or int8 for the run), _capN (the process may use N GiB:
torch.cuda.set_per_process_memory_fraction), _streamN (weights_vram_gib=N), _budgetN (vram_budget_gib=N: block
swap as the budget plans), _swapN (blocks_to_swap=N), _adamw8bit, _adafactor, _full (algorithm full: the
targets' own weights trained, full fine-tuning), _bf16copies (fine_tune_dtype bf16: the trained weights held in
bf16, updates rounded stochastically), _everyweight (the resnet convolutions, norms and biases trained too,
conv_rank and train_norms_and_biases: with _full _alllinear, every tensor of SDXL's UNet but conv_in and
conv_out), _fused (MemoryOptions' fused_backward), _compile
(torch_compile), _fp8compute (fp8_compute: the adapted layers' frozen products in fp8; _minmacsX sets its
threshold SpeedPaths.fp8_min_macs to X multiply-adds, e.g. _minmacs1e10), _plainrope (Flux's RoPE in
the host's plain PyTorch, not fused), _cpuencodings (the trained text encoders' encodings handed over
on ComfyUI's intermediate device, the CPU, and the pooled output through the host's extra_conds:
SpeedPaths.encodings_on_device off), _layercasts (no ComputeCopies: each
adapted layer casts its fp32 LoRA weights to bf16 and their gradients back), _te (the text
encoders trained too, text_encoder_lr 1e-5: the model's full-size text encoders, random weights, bf16:
SDXL's CLIP-L and CLIP-G, Flux.1's CLIP-L (and T5-XXL, loaded), Qwen-Image's Qwen2.5-VL 7B; _te-NAMES
trains those of AdapterSpec's text_encoders, without underscores, '+' between: _te-t5xxl, _te-clipl+t5xxl);
model: sdxl, flux, wan (Wan 2.1 14B text-to-video on 480p clips of
33 frames; _wN, _framesN change them), qwen (Qwen-Image 20B text-to-image), flux2 (Flux.2 dev 32B: its file
in fp8, FP8_FILES), klein (Flux.2 klein 9B). Each result names its
resolution, batch and rank and its images/s (clips/s); ours is compared with the fastest built-in of
the same model, checkpointing, resolution, batch and rank in the run (best_builtin, speedup_vs_builtin).
PROFILE=1 writes torch.profiler's tables of two steps, PROFILE=python cProfile's (Python functions by
own and cumulative time), PROFILE=sync the calls that made the host wait for the GPU in two steps, by
their Python stacks, to $OUT.
"""

import gc
import json
import logging
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.full_size import (  # noqa: E402
    FLUX2_DEV_LAYOUT,
    FLUX2_KLEIN_9B_LAYOUT,
    FLUX_DEV_LAYOUT,
    QWEN_IMAGE_LAYOUT,
    SDXL_UNET,
    WAN21_14B_LAYOUT,
)
from devkit.dynamic_vram import enable_dynamic_vram, load_aimdo  # noqa: E402


def stub_pyav():
    """Empty `av` modules where PyAV is missing (bench/pyav_stand_in/pyav_finder.py)."""
    sys.path.insert(0, os.path.join(ROOT, "bench", "pyav_stand_in"))
    import pyav_finder

    pyav_finder.install()


def model_config(model_name):
    import comfy.supported_models

    if model_name == "sdxl":
        return comfy.supported_models.SDXL(dict(SDXL_UNET))
    from devkit.detected_configs import detected_model_config

    if model_name == "wan":
        return detected_model_config(WAN21_14B_LAYOUT, expected_class="WAN21_T2V")
    if model_name == "qwen":
        return detected_model_config(QWEN_IMAGE_LAYOUT, expected_class="QwenImage")
    if model_name == "flux2":
        return detected_model_config(FLUX2_DEV_LAYOUT, expected_class="Flux2")
    if model_name == "klein":
        return detected_model_config(FLUX2_KLEIN_9B_LAYOUT, expected_class="Flux2")
    return detected_model_config(FLUX_DEV_LAYOUT, expected_class="Flux")


# Models whose random file is written in fp8 (matrices float8_e4m3fn, the rest bf16): Flux.2 dev's 32B in
# bf16 (64 GB) would not fit the GPU machine's 64 GiB disk; loaded with weight dtype bf16 they are upcast.
FP8_FILES = {"flux2"}


def weights_file(model_name):
    """The full-size model (SDXL, Flux-dev, Wan 2.1 14B, Qwen-Image, Flux.2 dev, Flux.2 klein 9B) from ComfyUI's
    own classes, random weights (the baseline's init, so both trainers see the same kind of weights), built on
    the GPU and saved once as a bf16 diffusion-model file (FP8_FILES: fp8; once per machine: the same seed gives
    the same weights)."""
    path = os.path.join(tempfile.gettempdir(), f"eridiffusion_bench_{model_name}.safetensors")
    if os.path.exists(path):  # an earlier process of this machine saved the same weights
        return path
    import comfy.model_management as mm
    import safetensors.torch
    import torch

    config = model_config(model_name)
    config.set_inference_dtype(torch.bfloat16, None)
    device = mm.get_torch_device()
    model = config.get_model({}, device=device)
    generator = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.02, generator=generator)
            elif "norm" in name and name.endswith("weight"):
                p.fill_(1.0)
            else:
                p.normal_(0, 0.01, generator=generator)

    def saved(value):
        fp8 = model_name in FP8_FILES and value.dim() >= 2
        return value.to("cpu", torch.float8_e4m3fn if fp8 else torch.bfloat16).contiguous()

    state = {k: saved(v) for k, v in model.diffusion_model.state_dict().items()}
    del model
    torch.cuda.empty_cache()
    safetensors.torch.save_file(state, path + ".tmp")
    os.replace(path + ".tmp", path)
    return path


def fp8_scaled_file(model_name):
    """The model's file (weights_file) as an fp8_scaled checkpoint (ComfyUI 0.28's mixed-precision format, as
    Comfy-Org ships Qwen-Image's, Flux.2's and Wan's): the matrices of its blocks float8_e4m3fn with a per-tensor
    `weight_scale` and a `comfy_quant` entry, the rest as the file holds it. Written once per machine."""
    path = os.path.join(tempfile.gettempdir(), f"eridiffusion_bench_{model_name}_fp8_scaled.safetensors")
    if os.path.exists(path):
        return path
    import safetensors
    import safetensors.torch

    from devkit.quantized_bases import fp8_scaled

    with safetensors.safe_open(weights_file(model_name), "pt") as f:
        state = {k: f.get_tensor(k) for k in f.keys()}
    matrices = [k for k, v in state.items() if k.endswith(".weight") and v.dim() == 2 and "blocks." in k]
    layers = [k[: -len(".weight")] for k in matrices]
    safetensors.torch.save_file(fp8_scaled(state, layers), path + ".tmp")
    os.replace(path + ".tmp", path)
    return path


def build(model_name, weight_dtype_name="bf16"):
    """The model loaded from its file as UNETLoader loads it (weight_dtype fp8: float8_e4m3fn; fp8_scaled: the
    fp8_scaled checkpoint of fp8_scaled_file at UNETLoader's default weight_dtype)."""
    import comfy.sd
    import torch

    if weight_dtype_name == "fp8_scaled":
        return comfy.sd.load_diffusion_model(fp8_scaled_file(model_name), model_options={})
    dtype = {"bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn}[weight_dtype_name]
    return comfy.sd.load_diffusion_model(weights_file(model_name), model_options={"dtype": dtype})


# (latent channels, text tokens, text width, pooled width) as each model's text encoders give them.
# Wan's umt5 gives no pooled output, nor does Qwen-Image's Qwen2.5-VL 7B (its last hidden states, 3584
# wide). ComfyUI pads no Qwen-Image prompt and cuts off the chat template's system part, so its tokens
# are the caption's plus five: 256 stands for a long descriptive caption (about 190 words), half the 512
# Qwen-Image's pipeline allows.
SHAPES = {
    "sdxl": (4, 77, 2048, 1280),
    "flux": (16, 512, 4096, 768),
    "wan": (16, 512, 4096, None),
    "qwen": (16, 256, 3584, None),
    # Flux.2: 128 latent channels at a sixteenth of the pixels (its VAE's 32, patched 2x2 by ComfyUI's latent
    # format); dev's Mistral Small 3.1 gives 3 x 5120-wide states, klein 9B's Qwen3-8B 3 x 4096, no pooled one
    "flux2": (128, 512, 15360, None),
    "klein": (128, 512, 12288, None),
}
DOWNSCALE = {"flux2": 16, "klein": 16}  # pixels per latent (else 8)
SHAPES["tiny_wan"] = (16, 16, 32, None)  # devkit's tiny Wan stacks (TINY=1 checks: bench/experts_speed.py)
# The models whose latents have a frame axis (ComfyUI's latent_dimensions 3): Wan's clips, and
# Qwen-Image's images, which its VAE (Wan 2.1's) encodes as clips of one frame, (C, 1, h, w).
FRAME_AXIS = {"wan", "tiny_wan", "qwen"}


def conditioning(model_name, generator=None, scale=0.5, tokens=None):
    """One random ComfyUI conditioning as the model's text encoders shape it (zeros: scale 0), of `tokens`
    text tokens (else the model's SHAPES)."""
    import torch

    _, default_tokens, width, pooled = SHAPES[model_name]
    tokens = tokens or default_tokens
    extra = {} if pooled is None else {"pooled_output": torch.randn(1, pooled, generator=generator) * scale}
    return [[torch.randn(1, tokens, width, generator=generator) * scale, extra]]


# The text encoders of each model, by the attribute of ComfyUI's CLIP model that holds each and
# the CLIPType their files load as (SDXL: CLIP-L and CLIP-G; Flux.1: CLIP-L and T5-XXL; Qwen-Image: Qwen2.5-VL 7B;
# Flux.2-klein 9B: Qwen3-8B).
TEXT_ENCODERS = {
    "sdxl": (("clip_l", "clip_g"), "STABLE_DIFFUSION"),
    "flux": (("clip_l", "t5xxl"), "FLUX"),
    "qwen": (("qwen25_7b",), "QWEN_IMAGE"),
    "klein": (("qwen3_8b",), "FLUX2"),
}


def clip_target(model_name):
    """The ClipTarget of the model's text encoders, as its detected config gives it. Flux.2's config picks
    its encoder from a checkpoint's text-encoder keys (none: dev's Mistral), so klein 9B's is named to it
    by the key of its Qwen3-8B's final norm (bf16: the dtype the encoder is built in)."""
    config = model_config(model_name)
    if model_name != "klein":
        return config.clip_target()
    import torch

    norm = f"{config.text_encoder_key_prefix[0]}qwen3_8b.transformer.model.norm.weight"
    return config.clip_target({norm: torch.zeros(1, dtype=torch.bfloat16)})


def clip_files(model_name):
    """The model's text encoders at full size, random weights, saved once as bf16 files (one per
    encoder, in the layout CLIPLoader and DualCLIPLoader read)."""
    import safetensors.torch
    import torch

    names, _ = TEXT_ENCODERS[model_name]
    suffix = {"clip_l": "l", "clip_g": "g"}
    paths = [
        os.path.join(tempfile.gettempdir(), f"eridiffusion_bench_{model_name}_{suffix.get(name, name)}.safetensors")
        for name in names
    ]
    if not all(os.path.exists(path) for path in paths):
        from eridiffusion.tiny_models import text_encoder

        clip = text_encoder(clip_target(model_name), torch.Generator().manual_seed(2), {})
        for path, name in zip(paths, names):
            encoder = getattr(clip.cond_stage_model, name)
            state = {k: v.to(torch.bfloat16).contiguous() for k, v in encoder.transformer.state_dict().items()}
            safetensors.torch.save_file(state, path + ".tmp")
            os.replace(path + ".tmp", path)
        del clip
    return paths


def encoders_named(model_name, names):
    """AdapterSpec's text_encoders of a plan's _te-NAMES ('+' between names written without underscores)."""
    known = {name.replace("_", ""): name for name in TEXT_ENCODERS[model_name][0]}
    wanted = [n for n in names.split("+") if n]
    unknown = [n for n in wanted if n not in known]
    if unknown:
        have = ", ".join(known)
        raise SystemExit(f"_te-{names}: {model_name} has the text encoders {have}, not {', '.join(unknown)}")
    return ",".join(known[n] for n in wanted)


def full_size_clip(model_name):
    """The model's text encoders at full size, random weights (clip_files), loaded with ComfyUI's
    CLIPLoader code (comfy.sd.load_clip), as a user's graph does."""
    import comfy.sd

    clip_type = getattr(comfy.sd.CLIPType, TEXT_ENCODERS[model_name][1])
    return comfy.sd.load_clip(clip_files(model_name), clip_type=clip_type)


def random_data(model_name, images=4, resolution=1024, work=None):
    """Random latents (8x smaller than the pixels; clips: a latent frame per 4 frames after the
    first, as Wan's VAE gives them; a FRAME_AXIS model's images: one latent frame) and random
    conditionings, `images` of them at `work`'s size (else `resolution`²)."""
    import torch

    from eridiffusion.training.data.training_data import TrainingData, TrainingSample

    work = work or Work(resolution)
    channels = SHAPES[model_name][0]
    generator = torch.Generator().manual_seed(1)
    frames = ((work.frames - 1) // 4 + 1,) if model_name in FRAME_AXIS or work.frames > 1 else ()
    samples = []
    for i in range(images):
        cond = conditioning(model_name, generator, tokens=work.tokens)
        scale = DOWNSCALE.get(model_name, 8)
        latent = torch.randn(channels, *frames, work.resolution // scale, work.width // scale, generator=generator)
        bucket = (work.width, work.resolution)
        samples.append(TrainingSample(f"random_{i}", latent, [cond], bucket, ("random",), frames=work.frames))
    return TrainingData(
        samples, conditioning(model_name, scale=0.0, tokens=work.tokens), 0.0, 1, work.resolution, "random"
    )


class Work:
    """What one step trains on: image height (and width, else square), images or clips per step,
    adapter rank, frames per clip (1: images), text tokens (None: the model's SHAPES)."""

    def __init__(self, resolution=1024, batch=1, rank=16, frames=1, width=None, tokens=None):
        self.resolution, self.batch, self.rank, self.frames = resolution, batch, rank, frames
        self.width, self.tokens = width or resolution, tokens

    # Wan's 480p clips: 832x480, 33 frames (9 latent frames)
    VIDEO_DEFAULTS = {"wan": {"res": 480, "w": 832, "frames": 33}}

    @classmethod
    def of(cls, parts, model_name="sdxl"):
        """From an experiment name's parts: _resN (height), _wN (width), _framesN, _bsN, _rankN, _tokN,
        each defaulting as above (Wan: VIDEO_DEFAULTS)."""
        defaults = {"res": 1024, "w": None, "frames": 1, "bs": 1, "rank": 16, "tok": None}
        defaults.update(cls.VIDEO_DEFAULTS.get(model_name, {}))

        def number(prefix):
            values = [p[len(prefix) :] for p in parts if p.startswith(prefix)]
            return next((int(v) for v in values if v.isdigit()), defaults[prefix])

        return cls(number("res"), number("bs"), number("rank"), number("frames"), number("w"), number("tok"))

    def record(self):
        video = {"width": self.width, "frames": self.frames} if self.frames > 1 or self.width != self.resolution else {}
        text = {"text_tokens": self.tokens} if self.tokens else {}
        return {"resolution": self.resolution, "batch": self.batch, "rank": self.rank, **video, **text}


class SyncStacks:
    """PROFILE=sync: each operation that makes the host wait for the GPU between start and stop
    (torch.cuda.set_sync_debug_mode's warnings), counted by the Python stack that called it; the
    table goes to $OUT/<name>.txt."""

    def __init__(self, name):
        self.name, self.stacks, self.shown = name, {}, None

    def start(self):
        import traceback
        import warnings

        import torch

        self.shown, self.filters = warnings.showwarning, list(warnings.filters)

        def record(message, category, filename, lineno, file=None, line=None):
            stack = "".join(traceback.format_stack(limit=14)[:-2])
            self.stacks[stack] = self.stacks.get(stack, 0) + 1

        warnings.showwarning = record
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")

    def stop(self):
        import warnings

        import torch

        torch.cuda.set_sync_debug_mode("default")
        warnings.showwarning, warnings.filters[:] = self.shown, self.filters
        lines = [f"{sum(self.stacks.values())} synchronizing calls in 2 steps, {len(self.stacks)} call sites"]
        for stack, count in sorted(self.stacks.items(), key=lambda item: -item[1]):
            lines += [f"== {count} x", stack]
        with open(os.path.join(os.environ.get("OUT", "/tmp"), self.name + ".txt"), "w") as f:
            f.write("\n".join(lines))


def ours(
    patcher,
    model_name,
    checkpointing,
    targets,
    work=Work(),
    cuda_graphs=False,
    optimizer="AdamW",
    weights_vram_gib=0.0,
    torch_compile=False,
    clip=None,
    fp8_compute=False,
    fp8_min_macs=None,
    fused_rope=True,
    encodings_on_device=True,
    layer_casts=False,
    steps=14,
    warmup=4,
    vram_budget_gib=0.0,
    blocks_to_swap=0,
    algorithm="lora",
    fused_backward=False,
    bf16_copies=False,
    every_weight=False,
    base_quantization="none",
    text_encoders="",
):
    import torch

    from eridiffusion.training.adapters import AdapterSpec
    from eridiffusion.training.run.config import TrainConfig
    from eridiffusion.training.run.precision import PrecisionSpec
    from eridiffusion.training.run.trainer import TrainingHooks, train_lora
    from eridiffusion.training.speed import fp8_products
    from eridiffusion.training.speed.paths import SpeedPaths

    events = []
    python_profile = os.environ.get("PROFILE") == "python"  # cProfile: the Python functions a step spends in
    profile_steps = (warmup + 2, warmup + 4) if os.environ.get("PROFILE") else None
    if os.environ.get("PROFILE") == "sync":  # where steps wait for the GPU: torch's sync debug mode, with stacks
        profiler = SyncStacks(f"syncs_{'ckpt' if checkpointing else 'nockpt'}_{targets}")
    elif python_profile:
        import cProfile

        profiler = cProfile.Profile()
    else:
        profiler = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        )

    def on_progress(step, total, losses, stats):
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        events.append(event)
        if profile_steps and step == profile_steps[0]:
            profiler.enable() if python_profile else profiler.start()
        if profile_steps and step == profile_steps[1] and isinstance(profiler, SyncStacks):
            profiler.stop()
        elif profile_steps and step == profile_steps[1] and python_profile:
            import io
            import pstats

            profiler.disable()
            text = io.StringIO()
            for order in ("tottime", "cumulative"):
                pstats.Stats(profiler, stream=text).sort_stats(order).print_stats(45)
            name = f"pyprofile_{'ckpt' if checkpointing else 'nockpt'}_{targets}"
            with open(os.path.join(os.environ.get("OUT", "/tmp"), name + ".txt"), "w") as f:
                f.write(text.getvalue())
        elif profile_steps and step == profile_steps[1]:
            profiler.stop()
            backend = os.environ.get("LYCORIS_KERNEL_BACKEND", "auto")
            name = f"profile_{'ckpt' if checkpointing else 'nockpt'}_{targets}_{backend}"
            table = profiler.key_averages().table(sort_by="self_cuda_time_total", row_limit=25)
            table += "\n" + profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)
            with open(os.path.join(os.environ.get("OUT", "/tmp"), name + ".txt"), "w") as f:
                f.write(table)

    config = TrainConfig(
        steps=steps,
        learning_rate=1e-4,
        dtype="bf16",
        batch_size=work.batch,
        gradient_checkpointing=checkpointing,
        cuda_graphs="on" if cuda_graphs else "off",
        optimizer=optimizer,
        weights_vram_gib=weights_vram_gib,
        vram_budget_gib=vram_budget_gib,
        blocks_to_swap=blocks_to_swap,
        torch_compile=torch_compile,
        fp8_compute=fp8_compute,
        fused_backward=fused_backward,
        precision=PrecisionSpec(fine_tune_dtype="bf16" if bf16_copies else "fp32"),
        base_quantization=base_quantization,
        text_encoder_lr=1e-5 if clip is not None else 0.0,
        adapter=AdapterSpec(
            algorithm=algorithm,
            rank=work.rank,
            alpha=float(work.rank),
            targets=targets,
            conv_rank=work.rank if every_weight else 0,
            train_norms_and_biases=every_weight,
            text_encoders=text_encoders,
        ),
        log_every=steps,
        eval_images=1,
        eval_timesteps=1,
        run_name="bench",
        speed=SpeedPaths(
            fused_rope=fused_rope,
            encodings_on_device=encodings_on_device,
            compute_copies=not layer_casts,
            fp8_min_macs=fp8_min_macs,
        ),
    )
    fp8_messages = _Messages("fp8_compute:")
    logger = logging.getLogger()  # the trainer logs as ComfyUI does, to the root logger
    logger.addHandler(fp8_messages)
    level = logger.level
    logger.setLevel(min(logger.getEffectiveLevel(), logging.INFO))
    try:
        with torch.inference_mode(False):
            hooks = TrainingHooks(on_progress)
            data = random_data(model_name, images=max(4, work.batch), work=work)
            result = train_lora(patcher, data, config, tempfile.mkdtemp(), hooks=hooks, clip=clip)
    finally:
        logger.removeHandler(fp8_messages)
        logger.setLevel(level)
    torch.cuda.synchronize()
    times = [a.elapsed_time(b) / 1000 for a, b in zip(events[warmup:], events[warmup + 1 :])]
    # a memory cap (_capN) stands for the training's card; ComfyUI sizes the sampler's loading from
    # the device's free memory, which knows nothing of a cap, so the check samples without one
    torch.cuda.set_per_process_memory_fraction(1.0)
    return {
        "s_per_step": statistics.median(times),
        "steps_timed": len(times),
        "peak_GiB": result.peak_memory_gib,
        "peak_reserved_GiB": torch.cuda.max_memory_reserved() / 2**30,
        "loss_first_last": [result.losses[0], result.losses[-1]],
        "losses": result.losses,
        "trainable_parameters": sum(p.numel() for p in result.trained.parameters()),
        "block_swap": result.block_swap,
        "result_model_samples": samples_finite(result.patcher, model_name),
        **(
            {
                "fp8_compute": {
                    "min_macs": fp8_products.MIN_MACS if fp8_min_macs is None else fp8_min_macs,
                    "min_width": fp8_products.MIN_WIDTH,
                    "log": fp8_messages.messages,
                }
            }
            if fp8_compute
            else {}
        ),
    }


# Dense (no sparsity) bf16 tensor-core peaks, from NVIDIA's data sheets, by a word of the device name.
DENSE_BF16_PEAK = {"H200": 989.4e12, "H100 80GB HBM3": 989.4e12, "H100 PCIe": 756.0e12, "A100": 312.0e12}


def run_header(dynamic_vram):
    """What a results file says of its run: the date, the GPU, torch, the host, dynamic VRAM, the commit."""
    import subprocess

    import torch

    from eridiffusion.comfy_compat import host_version

    commit = subprocess.run(
        ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    return {
        "date": time.strftime("%Y-%m-%d"),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "comfyui": host_version(),
        "dynamic_vram": dynamic_vram,
        "commit": os.environ.get("COMMIT") or commit,
    }


def dense_bf16_peak():
    import torch

    name = torch.cuda.get_device_name()
    return next((peak for key, peak in DENSE_BF16_PEAK.items() if key in name), None)


def step_flops(patcher, model_name, targets, work=Work(), clip=None, text_encoders=""):
    """The FLOPs of one eager training step without checkpointing: a 2-step run's count less a 1-step
    run's (the evaluations and setup count alike in both)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from eridiffusion.training.adapters import AdapterSpec
    from eridiffusion.training.run.config import TrainConfig
    from eridiffusion.training.run.trainer import train_lora

    counts = []
    for steps in (1, 2):
        config = TrainConfig(
            steps=steps,
            dtype="bf16",
            batch_size=work.batch,
            gradient_checkpointing=False,
            cuda_graphs="off",
            text_encoder_lr=1e-5 if clip is not None else 0.0,
            adapter=AdapterSpec(rank=work.rank, alpha=float(work.rank), targets=targets, text_encoders=text_encoders),
            log_every=steps,
            eval_images=1,
            eval_timesteps=1,
            run_name="bench_flops",
        )
        counter = FlopCounterMode(display=False)
        with torch.inference_mode(False), counter:
            data = random_data(model_name, images=max(4, work.batch), work=work)
            train_lora(patcher, data, config, tempfile.mkdtemp(), clip=clip)
        counts.append(counter.get_total_flops())
    return counts[1] - counts[0]


class _Messages(logging.Handler):
    """Keeps the messages (INFO and up) that contain `marker`."""

    def __init__(self, marker):
        super().__init__(logging.INFO)
        self.marker, self.messages = marker, []

    def emit(self, record):
        message = record.getMessage()
        if self.marker in message:
            self.messages.append(message)


def samples_finite(patcher, model_name):
    """Two sampler steps of the trained MODEL through ComfyUI's own sampling, as a KSampler
    after the trainer runs them: whether the output is finite."""
    import comfy.sample
    import torch

    cond = conditioning(model_name)
    frames = {"wan": (3,), "qwen": (1,)}.get(model_name, ())
    latent = torch.zeros(1, SHAPES[model_name][0], *frames, 128, 128)
    noise = torch.randn(latent.shape, generator=torch.Generator().manual_seed(0))
    out = comfy.sample.sample(patcher, noise, 2, 1.0, "euler", "simple", cond, cond, latent, disable_pbar=True, seed=0)
    return bool(torch.isfinite(out).all())


def builtin(patcher, model_name, checkpointing, options, work=Work(), steps=10, warmup=2):
    """ComfyUI's TrainLoraNode as the published baseline ran it, with the host's newer inputs
    (`options`: bypass_mode, quantized_backward, offloading, checkpoint_depth) where it has them;
    the median step after `warmup` steps."""
    import inspect

    import comfy_extras.nodes_train as nodes_train
    import torch

    data = random_data(model_name, images=max(4, work.batch), work=work)
    accepted = inspect.signature(nodes_train.TrainLoraNode.execute).parameters
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(f"this host's TrainLoraNode has no {unknown}")
    newer = {
        "quantized_backward": False,
        "checkpoint_depth": 1,
        "offloading": False,
        "bucket_mode": False,
        "bypass_mode": False,
    }
    extra = {k: [options.get(k, v)] for k, v in newer.items() if k in accepted}

    # The node offers no per-step hook: its AdamW's step() is timed with CUDA events instead.
    events = []
    adamw_step = torch.optim.AdamW.step

    def timed_step(self, *args, **kwargs):
        out = adamw_step(self, *args, **kwargs)
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        events.append(event)
        return out

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    latents = [{"samples": s.latent[None].to(torch.bfloat16)} for s in data.samples]
    cond = data.samples[0].conditionings[0]
    if model_name == "flux":
        cond = [[cond[0][0], dict(cond[0][1], guidance=1.0)]]
    torch.optim.AdamW.step = timed_step
    try:
        nodes_train.TrainLoraNode.execute(
            model=[patcher],
            latents=latents,
            positive=[cond],
            batch_size=[work.batch],
            steps=[steps],
            grad_accumulation_steps=[1],
            learning_rate=[1e-4],
            rank=[work.rank],
            optimizer=["AdamW"],
            loss_function=["MSE"],
            seed=[0],
            training_dtype=["bf16"],
            lora_dtype=["bf16"],
            algorithm=["LoRA"],
            gradient_checkpointing=[checkpointing],
            existing_lora=["[None]"],
            **extra,
        )
    finally:
        torch.optim.AdamW.step = adamw_step
    torch.cuda.synchronize()
    times = [a.elapsed_time(b) / 1000 for a, b in zip(events[warmup:], events[warmup + 1 :])]
    # a memory cap (_capN) stands for the training's card; ComfyUI sizes the sampler's loading from
    # the device's free memory, which knows nothing of a cap, so the check samples without one
    torch.cuda.set_per_process_memory_fraction(1.0)
    return {
        "s_per_step": statistics.median(times),
        "steps_timed": len(times),
        "peak_GiB": torch.cuda.max_memory_allocated() / 2**30,
        "options": {k: v[0] for k, v in extra.items()},
    }


def main():
    stub_pyav()
    load_aimdo()
    from eridiffusion.runtime import start_host_in_temp_dir

    start_host_in_temp_dir("eridiffusion-bench-")
    import torch

    plan = [p for p in os.environ.get("PLAN", "ours_sdxl_ckpt,builtin_sdxl_ckpt").split(",") if p]
    dynamic_vram = enable_dynamic_vram()

    results = []
    total_gib = torch.cuda.get_device_properties(0).total_memory / 2**30
    peak = dense_bf16_peak()
    flops_of = {}  # (model, work, targets, te) -> FLOPs of one step
    for item in plan:
        parts = item.split("_")
        kind, model_name, checkpointing = parts[0], parts[1], parts[2] == "ckpt"
        cap = next((float(p[3:]) for p in parts if p.startswith("cap")), None)
        stream = next((float(p[6:]) for p in parts if p.startswith("stream")), 0.0)
        work = Work.of(parts, model_name)
        te = next((p for p in reversed(parts) if p == "te" or p.startswith("te-")), None)  # encoders trained
        text_encoders = encoders_named(model_name, te[3:]) if te else ""
        started = time.time()
        patcher = None
        try:
            patcher = build(model_name, "fp8" if "fp8" in parts else "bf16")
            torch.cuda.reset_peak_memory_stats()
            if cap:
                torch.cuda.set_per_process_memory_fraction(cap / total_gib)
            if kind == "ours":
                targets = "all-linear" if "alllinear" in parts else ("attention" if model_name == "sdxl" else "auto")
                r = ours(
                    patcher,
                    model_name,
                    checkpointing,
                    targets,
                    work,
                    cuda_graphs="graphs" in parts,
                    optimizer=next((o for o in ("AdamW8bit", "Adafactor") if o.lower() in parts), "AdamW"),
                    weights_vram_gib=stream,
                    torch_compile="compile" in parts,
                    clip=full_size_clip(model_name) if te else None,
                    text_encoders=text_encoders,
                    fp8_compute="fp8compute" in parts,
                    fp8_min_macs=next((int(float(p[7:])) for p in parts if p.startswith("minmacs")), None),
                    fused_rope="plainrope" not in parts,
                    encodings_on_device="cpuencodings" not in parts,
                    layer_casts="layercasts" in parts,
                    vram_budget_gib=next((float(p[6:]) for p in parts if p.startswith("budget")), 0.0),
                    blocks_to_swap=next((int(p[4:]) for p in parts if p.startswith("swap")), 0),
                    algorithm="full" if "full" in parts else "lora",
                    fused_backward="fused" in parts,
                    bf16_copies="bf16copies" in parts,
                    every_weight="everyweight" in parts,
                    base_quantization=next((q for q in ("nf4", "int8") if q in parts), "none"),
                )
            else:
                options = {
                    "bypass_mode": "bypass" in parts,
                    "quantized_backward": "qbwd" in parts,
                    "offloading": "offload" in parts,
                }
                depths = [int(p[5:]) for p in parts if p.startswith("depth")]
                if depths:
                    options["checkpoint_depth"] = depths[-1]
                options = {k: v for k, v in options.items() if v}
                r = builtin(
                    patcher, model_name, checkpointing, options, work, *((5, 1) if model_name == "flux" else (10, 2))
                )
            r["memory_cap_GiB"] = cap
            if "s_per_step" in r:
                r["images_per_s"] = work.batch / r["s_per_step"]
                targets = "all-linear" if "alllinear" in parts else ("attention" if model_name == "sdxl" else "auto")
                key = (model_name, *work.record().items(), targets, te)
                if key not in flops_of and os.environ.get("MFU", "1") == "1":
                    torch.cuda.set_per_process_memory_fraction(1.0)
                    clip = full_size_clip(model_name) if te else None
                    try:  # (an eager step without checkpointing: Wan's runs out of memory; the row keeps its time)
                        flops_of[key] = step_flops(patcher, model_name, targets, work, clip, text_encoders)
                    except torch.OutOfMemoryError as error:
                        r["mfu_error"] = repr(error)[:200]
                        gc.collect()
                        torch.cuda.empty_cache()
                if key in flops_of:
                    r["tflops_per_step"] = flops_of[key] / 1e12
                    r["mfu"] = flops_of[key] / r["s_per_step"] / peak if peak else None
        except Exception as error:  # one failure must not hide the other figures
            import traceback

            traceback.print_exc()
            r = {"error": repr(error)[:300]}
        r.update(
            {
                "exp": item,
                "model": model_name,
                "grad_ckpt": checkpointing,
                **work.record(),
                "wall_s": round(time.time() - started, 1),
                "patcher": type(patcher).__name__,
            }
        )
        results.append(r)
        print("RESULT", json.dumps(r), flush=True)
        with open(os.path.join(os.environ.get("OUT", "/tmp"), "train_speed_partial.json"), "w") as f:
            json.dump(results, f, indent=1)
        torch.cuda.set_per_process_memory_fraction(1.0)
        patcher = None
        import comfy.model_management

        comfy.model_management.unload_all_models()
        gc.collect()
        torch.cuda.empty_cache()
    summary = {**run_header(dynamic_vram), "results": results}

    def same_work(r):
        return tuple(r.get(k) for k in ("model", "grad_ckpt", "resolution", "width", "frames", "batch", "rank"))

    for r in results:
        builtins = [b for b in results if b["exp"].startswith("builtin_") and same_work(b) == same_work(r)]
        builtins = [b for b in builtins if "s_per_step" in b]
        if r["exp"].startswith("ours_") and builtins and "s_per_step" in r:
            best = min(builtins, key=lambda b: b["s_per_step"])  # the built-in at its best settings
            r["best_builtin"] = best["exp"]
            r["speedup_vs_builtin"] = best["s_per_step"] / r["s_per_step"]
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "train_speed.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
