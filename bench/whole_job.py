"""A whole LoRA job as a user runs it, timed by phase: the shipped example workflow
(example_workflows/sdxl_lora.json) through ComfyUI's own PromptExecutor, its settings changed only
through its widgets, on full-size random-weight models written once (nothing downloaded), then the
same job with ComfyUI 0.28's own nodes in the same process.

Models: SDXL as one checkpoint for CheckpointLoaderSimple (the full-size UNet, CLIP-L, CLIP-G and
VAE of bench/train_speed.py's builders, written with ComfyUI's own save_checkpoint); Flux.1-dev as a
diffusion model + CLIP-L + T5-XXL + VAE for UNETLoader, DualCLIPLoader and VAELoader, which take the
example's checkpoint loader's place (there is no shipped Flux example). The files sit in /tmp once
per machine and are linked into the models folders of a temp ComfyUI base folder.

Photos: the DreamBooth photos of the datasets folder (dog, cat, backpack: 16 with captions), cut to
1024² squares. The issue asks for 20 training photos and 4 held back; there are 16, so 4 real photos
(dog 04, cat 04, backpack 04 and 05) are held back for validation and the 12 others are trained on
with 8 of them also mirrored left to right: 20 training images, 4 never trained on in any form.
Ours reads the 24 from one folder and holds the 4 back with LoadDataset's own `validation` widget
(0.15 of 24 names: the 4 real photos sit at the names it picks); the built-in reads the 20.

Job (STEPS=1000): 1000 steps, samples of the example's 2 prompts every STEPS/4 steps (25 sampling
steps SDXL, 20 Flux), validation every STEPS/10, a checkpoint every STEPS/4, then the workflow's
KSampler image (25 steps SDXL at cfg 7, 20 Flux at cfg 1). Ours at its best measured settings on the
H200 (SDXL: gradient_checkpointing off, CUDA graphs auto; Flux: checkpointing on; CHECKPOINTING=0|1
changes it); the built-in (its dataset nodes + MakeTrainingDataset + TrainLoraNode + SaveLoRA +
LoraModelLoader + KSampler) at its best (SDXL: no checkpointing, no bypass; Flux: checkpointing),
same rank 16, learning rate 1e-4, AdamW, bf16, captions and final-image settings. The built-in has
no samples, validation or checkpoints during training: those phases are null in its row.

Timing: every event ComfyUI's executor and the nodes send to the server is stamped on arrival
(a stand-in for ComfyUI's PromptServer, installed as the server's instance, and the progress-bar
hook ComfyUI's main.py installs), after a CUDA synchronize except for ComfyUI's throttled progress
bar events (which would sync mid-run): node boundaries from the executor's `executing` messages,
our trainer's phases from LoRATrainer's live `eridiffusion.progress` events (at most 4 a second,
each synchronised, which costs the steps about one launch gap per 0.25 s) plus the mtimes of the
files it writes (checkpoints, sample images), the built-in's steps from its ComfyUI progress bar
(it reads each step's loss back, so its steps are synchronous anyway). The step time is the median
over the intervals between events that hold nothing but steps; a checkpoint's start inside an
interval is placed at that median pace. Memory: at each node's start and at the run's end the server reads
the process's peak of GPU memory allocated and resets it, so each node has its own peak (`nodes`), and each
phase the highest of its nodes' (`peak_GiB_by_phase`: models loaded, caching, trainer, saving, final image);
the trainer resets the peak itself once its setup is done, so its node's is that of its steps, samples,
validation and checkpoints. Writes $OUT/whole_job.json and prints `RESULT {json}` lines.

    COMFYUI_PATH=<0.28 tree> MODEL=sdxl STEPS=1000 JOBS=ours,builtin python bench/whole_job.py
TINY=1: the tiny random-weight SDXL of TinyDemoModel (replacing the loader) on the CPU at 256²,
8 sampling steps, to check the script end to end (STEPS default 40 there).

MODEL=klein (issue 43's whole job inside a budget): example_workflows/flux2_klein_lora.json itself, its
three loaders given Flux.2-klein 9B's files (the diffusion model of bench/train_speed.py's klein rows,
its Qwen3-8B text encoder for CLIPLoader type flux2, and a Flux.2 VAE: 32 channels, batch-normed 2x2
patches), its samples and test image through its own CFGGuider/Flux2Scheduler/SamplerCustomAdvanced at
cfg 5, 20 steps; ours only. CAP=N runs the job as on an N GiB card (emulate_card: torch's allocator
capped, ComfyUI's loaders told the rest is reserved, dynamic VRAM off since it allocates beside torch)
with LoRATrainer's vram_budget_gib N; each node's and phase's highest GPU memory in use as the driver
counts it (nvidia-smi every 100 ms: `device_used_GiB_by_phase`, the CUDA context included) stands
beside torch's peaks. TINY=1 MODEL=klein: devkit's tiny klein 9B stack (real TAEF2) at 128² on the CPU.

    MODEL=klein CAP=12 STEPS=200 JOBS=ours bash bench/gpu_host.sh python3 bench/whole_job.py
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.train_speed import build, clip_files, full_size_clip, model_config, stub_pyav  # noqa: E402
from bench.train_speed import weights_file as diffusion_model_file  # noqa: E402
from devkit.dynamic_vram import enable_dynamic_vram, load_aimdo  # noqa: E402

TINY = os.environ.get("TINY") == "1"
MODEL = os.environ.get("MODEL", "sdxl")
# Each model's job: the shipped example it runs, the samples' and final image's sampling steps and cfg, and
# whether ours checkpoints activations (the built-in runs SDXL and Flux only: the klein example draws
# through SamplerCustomAdvanced, which its row has no place for).
JOB_MODELS = {
    "sdxl": ("sdxl_lora.json", 25, 7.0, False),
    "flux": ("sdxl_lora.json", 20, 1.0, True),
    "klein": ("flux2_klein_lora.json", 20, 5.0, True),
}
if MODEL not in JOB_MODELS:
    raise SystemExit(f"MODEL={MODEL}: the whole job runs {', '.join(JOB_MODELS)}")
EXAMPLE, FULL_SAMPLING_STEPS, CFG, CHECKPOINTING_DEFAULT = JOB_MODELS[MODEL]
STEPS = int(os.environ.get("STEPS", 40 if TINY else 1000))
JOBS = [job for job in os.environ.get("JOBS", "ours,builtin" if MODEL != "klein" else "ours").split(",") if job]
# TINY klein: the tiny stack's TAEF2 decodes at 8x what the example's Flux.2 latents lay out at 16x
RESOLUTION = (128 if MODEL == "klein" else 256) if TINY else 1024
SAMPLE_EVERY, CHECKPOINT_EVERY, VALIDATE_EVERY = max(1, STEPS // 4), max(1, STEPS // 4), max(1, STEPS // 10)
SAMPLING_STEPS = 8 if TINY else FULL_SAMPLING_STEPS
CHECKPOINTING = os.environ.get("CHECKPOINTING", "1" if CHECKPOINTING_DEFAULT else "0") == "1"
BUILTIN_CHECKPOINTING = MODEL == "flux"  # its best measured settings (bench/train_speed.py)
# CAP=N: the whole job as on a card of N GiB (emulate_card), with LoRATrainer's vram_budget_gib N
CAP = float(os.environ.get("CAP", "0"))
if CAP:
    # ComfyUI's dynamic VRAM allocates beside torch's allocator, which the cap is set on: off under a cap
    os.environ["DYNAMIC_VRAM"] = "0"
RANK, LEARNING_RATE = 16, 1e-4

VALIDATION_PHOTOS = [("dreambooth_dog", "04"), ("dreambooth_cat", "04"), ("dreambooth_backpack", "04")]
VALIDATION_PHOTOS.append(("dreambooth_backpack", "05"))
MIRRORED = 8  # of the 12 training photos, the first 8 are also trained on mirrored: 20 in all
VALIDATION_FRACTION = 0.15  # LoadDataset's widget: round(24 * 0.15) = 4 names held back
LOADERS = ("CheckpointLoaderSimple", "UNETLoader", "DualCLIPLoader", "CLIPLoader", "VAELoader")
LOADERS += ("WholeJobBench_TinySDXL", "EriDiffusionTest_TinyFamilyStack")
CACHING = ("EriDiffusion_LoadDataset", "EriDiffusion_CacheLatents", "LoadImageTextDataSetFromFolder")
CACHING += ("MakeTrainingDataset",)
TRAINERS = ("EriDiffusion_LoRATrainer", "TrainLoraNode")
SAVING = ("EriDiffusion_SaveLoRA", "SaveLoRA")
FINAL_IMAGE = ("CLIPTextEncode", "EmptyLatentImage", "KSampler", "VAEDecode", "SaveImage", "LoraModelLoader")
FINAL_IMAGE += ("EmptyFlux2LatentImage", "RandomNoise", "KSamplerSelect", "Flux2Scheduler", "CFGGuider")
FINAL_IMAGE += ("SamplerCustomAdvanced",)
FINAL_SAMPLERS = ("KSampler", "SamplerCustomAdvanced")
OUR_FOLDER, BUILTIN_FOLDER = "whole_job_photos", "whole_job_photos_builtin"


def sync():
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def read_and_reset_peak():
    """The peak of GPU memory allocated since the last reset (bytes; None without a GPU), then reset."""
    import torch

    if not torch.cuda.is_available():
        return None
    peak = torch.cuda.max_memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    return peak


def emulate_card(cap_gib):
    """The process as on a card of `cap_gib` GiB: torch's allocator capped there
    (set_per_process_memory_fraction), and ComfyUI's model management told that the rest of the GPU is
    reserved (what its --reserve-vram sets), so that its loaders place the text encoder, the VAE and the
    sampled model as they would on such a card (partly loaded where they do not fit) instead of as on
    the whole GPU. Returns the GiB reserved."""
    import comfy.model_management as mm
    import torch

    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    if cap_gib * 2**30 >= total:
        raise SystemExit(f"CAP={cap_gib:g}: this GPU has {total / 2**30:.1f} GiB")
    torch.cuda.set_per_process_memory_fraction(cap_gib * 2**30 / total)
    mm.EXTRA_RESERVED_VRAM += total - int(cap_gib * 2**30)
    return (total - cap_gib * 2**30) / 2**30


class DeviceMemory:
    """The GPU's memory in use as the driver counts it (nvidia-smi, every 100 ms, read on a thread of
    its own): the whole process's, its CUDA context and any allocator beside torch's included, which
    torch's own peak does not see. Without nvidia-smi or a GPU: no samples."""

    def __init__(self):
        import threading

        import torch

        self.samples = []  # [(perf_counter, GiB)]
        self.process = None
        if not torch.cuda.is_available() or shutil.which("nvidia-smi") is None:
            return
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0]
        gpu = visible or str(torch.cuda.current_device())
        query = ["nvidia-smi", "-i", gpu, "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-lms", "100"]
        self.process = subprocess.Popen(query, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            if line.strip().isdigit():
                self.samples.append((time.perf_counter(), int(line) / 1024))

    def node_peaks(self, spans, queued):
        """{node id: the highest GiB sampled while it ran} ({} without samples)."""
        found = {}
        for node, _, start, end in spans:
            values = [gib for t, gib in self.samples if start <= t - queued <= end]
            if values:
                found[node] = max(values)
        return found

    def stop(self):
        if self.process is not None:
            self.process.terminate()


class TimedServer:
    """What ComfyUI's executor and nodes need of its PromptServer, stamping each event as it comes
    (perf_counter, after a CUDA synchronize except for the progress bar's own events)."""

    UNSYNCED = ("progress", "progress_state")
    BOUNDARIES = ("executing", "execution_success", "execution_error")  # where a node's peak memory is read

    def __init__(self):
        self.client_id = None
        self.last_node_id = None
        self.last_prompt_id = None
        self.sockets_metadata = {}
        self.events = []
        self.peaks = {}  # {index in events: the process's peak GPU bytes since the boundary before}

    def send_sync(self, event, data, sid=None):
        if event not in self.UNSYNCED:
            sync()
        if event in self.BOUNDARIES:
            self.peaks[len(self.events)] = read_and_reset_peak()
        self.events.append((time.perf_counter(), event, data))

    def send_progress_text(self, text, node_id, sid=None):
        self.send_sync("progress_text", {"node": node_id, "text": text}, sid)

    def queue_updated(self):
        pass

    def progress_hook(self, value, total, preview_image, prompt_id=None, node_id=None):
        """ComfyUI main.py's progress-bar hook, less the preview images: the node's progress state
        and a `progress` event."""
        from comfy_execution.progress import get_progress_state
        from comfy_execution.utils import get_executing_context

        context = get_executing_context()
        if node_id is None:
            node_id = context.node_id if context is not None else self.last_node_id
        get_progress_state().update_progress(node_id, value, total, None)
        self.send_sync("progress", {"value": value, "max": total, "node": node_id})


def install_server():
    """A TimedServer as ComfyUI's PromptServer.instance and its progress-bar hook, as a server
    start does (the trainer's live events and ComfyUI's progress bars go to it)."""
    import comfy.utils
    import server as comfy_server

    timed = TimedServer()
    comfy_server.PromptServer.instance = timed
    comfy.utils.set_progress_bar_global_hook(timed.progress_hook)
    return timed


# ---- the photos -----------------------------------------------------------------------------


def prepare_photos(input_dir):
    """The photos at RESOLUTION², as described in the module docstring: input/OUR_FOLDER (24, the
    validation photos at the names LoadDataset holds back) and input/BUILTIN_FOLDER (the 20 training
    images). Returns the record of what went where."""
    from PIL import Image, ImageOps

    from devkit.paths import shared_datasets
    from eridiffusion.training.data.held_out import held_out_indices

    source = shared_datasets()
    photos = sorted(
        (subject, name[:-4])
        for subject in os.listdir(source)
        if subject.startswith("dreambooth_")
        for name in os.listdir(os.path.join(source, subject))
        if name.endswith(".jpg")
    )
    training = [p for p in photos if p not in VALIDATION_PHOTOS]
    items = [(p, False) for p in training] + [(p, True) for p in training[:MIRRORED]]
    count = len(items) + len(VALIDATION_PHOTOS)
    held = held_out_indices(count, VALIDATION_FRACTION, OUR_FOLDER)
    if len(held) != len(VALIDATION_PHOTOS):
        raise RuntimeError(f"LoadDataset would hold back {len(held)} of {count} names, not {len(VALIDATION_PHOTOS)}")
    validation, train_iter = iter(VALIDATION_PHOTOS), iter(items)
    ours, builtin = os.path.join(input_dir, OUR_FOLDER), os.path.join(input_dir, BUILTIN_FOLDER)
    os.makedirs(ours), os.makedirs(builtin)
    layout = []
    for index in range(count):
        (subject, stem), mirrored = (next(validation), False) if index in held else next(train_iter)
        with Image.open(os.path.join(source, subject, stem + ".jpg")) as image:
            image = ImageOps.fit(image.convert("RGB"), (RESOLUTION, RESOLUTION), Image.LANCZOS)
        image = ImageOps.mirror(image) if mirrored else image
        with open(os.path.join(source, subject, stem + ".txt"), encoding="utf-8") as f:
            caption = f.read().strip()
        folders = [ours] if index in held else [ours, builtin]
        for folder in folders:
            image.save(os.path.join(folder, f"{index:02d}.jpg"), quality=95)
            with open(os.path.join(folder, f"{index:02d}.txt"), "w", encoding="utf-8") as f:
                f.write(caption)
        role = "validation" if index in held else "training"
        layout.append(
            {"file": f"{index:02d}.jpg", "photo": f"{subject}/{stem}.jpg", "mirrored": mirrored, "role": role}
        )
    return {
        "source": source,
        "resolution": RESOLUTION,
        "training_images": len(items),
        "validation_images": len(VALIDATION_PHOTOS),
        "choice": "16 real photos: 4 held back for validation, 12 trained on, 8 of them also mirrored (20)",
        "files": layout,
    }


# ---- the models -------------------------------------------------------------------------------


def vae_file(model_name):
    """The model's VAE at full size (SD/SDXL: 4 latent channels; Flux.1: 16 and no quant convs; Flux.2: 32,
    with quant convs and the batch norm over its 2x2-patched latents that ComfyUI's VAE loader reads as
    Flux.2's), random weights, saved once as a bf16 VAELoader file."""
    import safetensors.torch
    import torch

    path = os.path.join(tempfile.gettempdir(), f"eridiffusion_bench_{model_name}_vae.safetensors")
    if os.path.exists(path):
        return path
    from comfy.ldm.models.autoencoder import AutoencoderKL, AutoencodingEngine

    from eridiffusion.tiny_models import init_weights

    channels = {"flux": 16, "klein": 32}.get(model_name, 4)
    ddconfig = {"double_z": True, "z_channels": channels, "resolution": 256, "in_channels": 3, "out_ch": 3}
    ddconfig.update({"ch": 128, "ch_mult": [1, 2, 4, 4], "num_res_blocks": 2, "attn_resolutions": [], "dropout": 0.0})
    if model_name == "klein":
        ddconfig["batch_norm_latent"] = True
    if model_name == "flux":
        module = AutoencodingEngine(
            regularizer_config={"target": "comfy.ldm.models.autoencoder.DiagonalGaussianRegularizer"},
            encoder_config={"target": "comfy.ldm.modules.diffusionmodules.model.Encoder", "params": ddconfig},
            decoder_config={"target": "comfy.ldm.modules.diffusionmodules.model.Decoder", "params": ddconfig},
        )
    else:
        module = AutoencoderKL(ddconfig=ddconfig, embed_dim=channels)
    init_weights(module, torch.Generator().manual_seed(3))
    if getattr(module, "bn", None) is not None:  # statistics a decode can divide by
        module.bn.running_mean.zero_()
        module.bn.running_var.fill_(1.0)
    state = {k: v.to(torch.bfloat16).contiguous() for k, v in module.state_dict().items()}
    safetensors.torch.save_file(state, path + ".tmp")
    os.replace(path + ".tmp", path)
    return path


def checkpoint_file():
    """Full-size SDXL as one checkpoint (UNet, CLIP-L, CLIP-G, VAE; random weights), written once
    with ComfyUI's own save_checkpoint, as its CheckpointSave node writes one."""
    path = os.path.join(tempfile.gettempdir(), "eridiffusion_bench_sdxl_checkpoint.safetensors")
    if os.path.exists(path):
        return path
    import comfy.model_management
    import comfy.sd
    import comfy.utils

    vae = comfy.sd.VAE(sd=comfy.utils.load_torch_file(vae_file("sdxl")))
    comfy.sd.save_checkpoint(path + ".tmp", build("sdxl"), full_size_clip("sdxl"), vae)
    os.replace(path + ".tmp", path)
    comfy.model_management.unload_all_models()
    return path


def tiny_model(seed, disable_dynamic=False):
    from eridiffusion.tiny_models import build_tiny_demo

    return build_tiny_demo("sdxl", seed)[0]


class TinyStack:
    """TINY=1's loader, a bench-only node: TinyDemoModel's tiny SDXL (MODEL, CLIP, VAE) whose MODEL
    also carries the recipe to build it again (cached_patcher_init), as a core loader's does: 0.28's
    TrainLoraNode deep-copies its model through that recipe and refuses a model without one."""

    NODE = "WholeJobBench_TinySDXL"
    RETURN_TYPES = ("MODEL", "CLIP", "VAE")
    FUNCTION = "load"
    CATEGORY = "bench"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"seed": ("INT", {"default": 0, "min": 0, "max": 2**32 - 1})}}

    def load(self, seed):
        from eridiffusion.tiny_models import build_tiny_demo

        model, clip, vae = build_tiny_demo("sdxl", seed)
        model.cached_patcher_init = (tiny_model, (seed,))
        return model, clip, vae


def link_models(base_dir):
    """The model files in the models folders of `base_dir` (linked, not copied), registered with
    ComfyUI; returns the loader nodes {output slot: (node type, inputs)} of the job's MODEL, CLIP, VAE."""
    import folder_paths

    def place(kind, path, name):
        folder = os.path.join(base_dir, "models", kind)
        os.makedirs(folder, exist_ok=True)
        os.symlink(path, os.path.join(folder, name))
        folder_paths.add_model_folder_path(kind, folder, is_default=True)
        return name

    if TINY:
        return {"family": "flux2_klein_9b"} if MODEL == "klein" else {"all": (TinyStack.NODE, {"seed": 0})}
    if MODEL == "sdxl":
        name = place("checkpoints", checkpoint_file(), "sdxl_random.safetensors")
        return {"all": ("CheckpointLoaderSimple", {"ckpt_name": name})}
    if MODEL == "klein":  # the example's own three loaders, given klein 9B's files
        (qwen3_8b,) = clip_files("klein")
        unet = place("diffusion_models", diffusion_model_file("klein"), "flux2_klein_9b_random.safetensors")
        return {
            "by_class": {
                "UNETLoader": {"unet_name": unet, "weight_dtype": "default"},
                "CLIPLoader": {
                    "clip_name": place("text_encoders", qwen3_8b, "qwen_3_8b_random.safetensors"),
                    "type": "flux2",
                    "device": "default",
                },
                "VAELoader": {"vae_name": place("vae", vae_file("klein"), "flux2_vae_random.safetensors")},
            }
        }
    clip_l, t5 = clip_files("flux")
    return {
        0: (
            "UNETLoader",
            {
                "unet_name": place("diffusion_models", diffusion_model_file("flux"), "flux1_dev_random.safetensors"),
                "weight_dtype": "default",
            },
        ),
        1: (
            "DualCLIPLoader",
            {
                "clip_name1": place("text_encoders", clip_l, "clip_l_random.safetensors"),
                "clip_name2": place("text_encoders", t5, "t5xxl_random.safetensors"),
                "type": "flux",
            },
        ),
        2: ("VAELoader", {"vae_name": place("vae", vae_file("flux"), "flux_ae_random.safetensors")}),
    }


def with_loaders(prompt, loaders, loader_id):
    """`prompt` with its node `loader_id` (MODEL, CLIP, VAE at slots 0, 1, 2) replaced by `loaders`:
    one node for all three, or one per slot (links rewired); or with its own loader nodes given other
    inputs ("by_class"), or replaced by a tiny family's stack ("family", devkit's executor-test node)."""
    if "family" in loaders:
        from devkit import tiny_family_node
        from devkit.workflow import with_family_stack

        tiny_family_node.register()
        return with_family_stack(prompt, loaders["family"])
    if "by_class" in loaders:
        for node in prompt.values():
            node["inputs"].update(loaders["by_class"].get(node["class_type"], {}))
        return prompt
    if "all" in loaders:
        kind, inputs = loaders["all"]
        prompt[loader_id] = {"class_type": kind, "inputs": dict(inputs)}
        return prompt
    del prompt[loader_id]
    first = max(int(i) for i in prompt) + 1
    ids = {slot: str(first + slot) for slot in loaders}
    for slot, (kind, inputs) in loaders.items():
        prompt[ids[slot]] = {"class_type": kind, "inputs": dict(inputs)}
    for node in prompt.values():
        for name, value in node["inputs"].items():
            if isinstance(value, list) and len(value) == 2 and value[0] == loader_id:
                node["inputs"][name] = [ids[value[1]], 0]
    return prompt


# ---- the two jobs ---------------------------------------------------------------------------------


def example_workflow():
    """The model's example workflow (EXAMPLE) as devkit.example_workflows renders it from this host's node
    definitions (the committed file is that render when it is current: example_file_current)."""
    from devkit.example_workflows import ALL_EXAMPLES, to_ui

    return to_ui(ALL_EXAMPLES[EXAMPLE]())


def example_file_current():
    from devkit.example_workflows import load_example

    return load_example(EXAMPLE) == json.loads(json.dumps(example_workflow()))


def our_prompt(loaders):
    """The model's example workflow as an API prompt, the job's values put on its widgets."""
    from devkit.workflow import set_training_settings, substitute, ui_to_api

    prompt = ui_to_api(example_workflow())
    sampling = {"steps": SAMPLING_STEPS, "cfg": CFG}
    size = {"width": RESOLUTION, "height": RESOLUTION}
    prompt = substitute(
        prompt,
        overrides={
            "EriDiffusion_LoadDataset": {"folder": OUR_FOLDER, "trigger_word": "", "validation": VALIDATION_FRACTION},
            "EriDiffusion_CacheLatents": {"resolution": RESOLUTION},
            "EriDiffusion_SampleDuringTraining": {
                "every": SAMPLE_EVERY,
                "width": RESOLUTION,
                "height": RESOLUTION,
                **sampling,
            },
            "EmptyLatentImage": size,
            "KSampler": sampling,
            # the klein example's test image (SamplerCustomAdvanced)
            "EmptyFlux2LatentImage": size,
            "Flux2Scheduler": {"steps": SAMPLING_STEPS, **size},
            "CFGGuider": {"cfg": CFG},
        },
    )
    loader_id = next((i for i, n in prompt.items() if n["class_type"] == "CheckpointLoaderSimple"), None)
    prompt = with_loaders(prompt, loaders, loader_id)
    settings = {
        "steps": STEPS,
        "save_every": CHECKPOINT_EVERY,
        "validate_every": VALIDATE_EVERY,
        "gradient_checkpointing": CHECKPOINTING,
    }
    if CAP:
        settings["vram_budget_gib"] = CAP
    return set_training_settings(prompt, settings), settings


def builtin_prompt(loaders, our):
    """The same job with ComfyUI 0.28's own nodes, as an API prompt: its dataset nodes, TrainLoraNode
    at its best settings, its SaveLoRA, its LoraModelLoader on the trained LORA_MODEL, and the
    final image with the example's prompts and sampler settings (`our`: our prompt)."""
    example = {n["class_type"]: n["inputs"] for n in our.values()}
    texts = [n["inputs"]["text"] for n in our.values() if n["class_type"] == "CLIPTextEncode"]
    train = {
        "model": ["1", 0],
        "latents": ["3", 0],
        "positive": ["3", 1],
        "batch_size": 1,
        "grad_accumulation_steps": 1,
        "steps": STEPS,
        "learning_rate": LEARNING_RATE,
        "rank": RANK,
        "optimizer": "AdamW",
        "loss_function": "MSE",
        "seed": 0,
        "training_dtype": "bf16",
        "lora_dtype": "bf16",
        "quantized_backward": False,
        "algorithm": "LoRA",
        "gradient_checkpointing": BUILTIN_CHECKPOINTING,
        "checkpoint_depth": 1,
        "offloading": False,
        "existing_lora": "[None]",
        "bucket_mode": False,
        "bypass_mode": False,
    }
    sampler = {k: v for k, v in example["KSampler"].items() if not isinstance(v, list)}
    prompt = {
        "1": None,
        "2": {"class_type": "LoadImageTextDataSetFromFolder", "inputs": {"folder": BUILTIN_FOLDER}},
        "3": {
            "class_type": "MakeTrainingDataset",
            "inputs": {"images": ["2", 0], "texts": ["2", 1], "vae": ["1", 2], "clip": ["1", 1]},
        },
        "4": {"class_type": "TrainLoraNode", "inputs": train},
        "5": {"class_type": "SaveLoRA", "inputs": {"lora": ["4", 0], "prefix": "loras/builtin_sks", "steps": ["4", 2]}},
        "6": {
            "class_type": "LoraModelLoader",
            "inputs": {"model": ["1", 0], "lora": ["4", 0], "strength_model": 1.0, "bypass": False},
        },
        "7": {"class_type": "CLIPTextEncode", "inputs": {"text": texts[0], "clip": ["1", 1]}},
        "8": {"class_type": "CLIPTextEncode", "inputs": {"text": texts[1], "clip": ["1", 1]}},
        "9": {"class_type": "EmptyLatentImage", "inputs": dict(example["EmptyLatentImage"])},
        "10": {
            "class_type": "KSampler",
            "inputs": {
                **sampler,
                "model": ["6", 0],
                "positive": ["7", 0],
                "negative": ["8", 0],
                "latent_image": ["9", 0],
            },
        },
        "11": {"class_type": "VAEDecode", "inputs": {"samples": ["10", 0], "vae": ["1", 2]}},
        "12": {"class_type": "SaveImage", "inputs": {"images": ["11", 0], "filename_prefix": "builtin/sks"}},
    }
    return with_loaders(prompt, loaders, "1"), train


def node_spans(events, prompt, queued):
    """[(node id, class, start, end)] from the executor's `executing` messages (each node runs
    until the next starts, the last until execution_success), and the end of the run."""
    starts = [(t, data["node"]) for t, event, data in events if event == "executing" and data.get("node")]
    end = next(t for t, event, _ in events if event in ("execution_success", "execution_error"))
    spans = []
    for (start, node), (following, _) in zip(starts, starts[1:] + [(end, None)]):
        spans.append((node, prompt[node]["class_type"], start - queued, following - queued))
    return spans, end - queued


def node_peaks(events, peaks):
    """{node id: GiB}: the process's peak GPU memory while each node ran (from its `executing` event to the
    next boundary, where TimedServer read and reset it); {} without a GPU."""
    bounds = [i for i in sorted(peaks) if peaks[i] is not None]
    found = {}
    for start, end in zip(bounds, bounds[1:]):
        _, event, data = events[start]
        if event == "executing" and data.get("node"):
            found[data["node"]] = peaks[end] / 2**30
    return found


def peaks_by_phase(spans, peaks):
    """{phase: GiB}: the highest node peak of each phase of the job (None where no node of it ran or no GPU)."""
    phases = {"models_loaded": LOADERS, "caching": CACHING, "trainer": TRAINERS, "saving": SAVING}
    phases["final_image"] = FINAL_IMAGE
    found = {}
    for phase, classes in phases.items():
        values = [peaks[node] for node, kind, _, _ in spans if kind in classes and node in peaks]
        found[phase] = max(values) if values else None
    return found


def duration(spans, classes):
    return sum(end - start for _, kind, start, end in spans if kind in classes)


def file_times(folder, queued, offset):
    """{file name: mtime on the perf_counter clock, relative to `queued`} of a folder's files."""
    if not os.path.isdir(folder):
        return {}
    return {n: os.path.getmtime(os.path.join(folder, n)) - offset - queued for n in os.listdir(folder)}


def our_trainer_phases(points, start, end, run_dir, queued, offset, steps):
    """The trainer's time split into its phases, from its progress points [(seconds, step)] (the
    live events after each reported step), its start and end, and the files it wrote."""
    checkpoint_times = file_times(os.path.join(run_dir, "checkpoints"), queued, offset)
    sample_times = file_times(os.path.join(run_dir, "samples"), queued, offset)

    def checkpoint_end(step):
        return next(t for n, t in checkpoint_times.items() if n.endswith(f"_step{step:06d}.safetensors"))

    def samples_end(step):
        return max(t for n, t in sample_times.items() if n.startswith(f"step_{step}_") and n.endswith(".png"))

    def extras(a, b):
        """What happens between the reports of steps a and b besides steps a+1..b."""
        validation = b % VALIDATE_EVERY == 0 or b == steps
        periodic = [c for c in range(a, b) if c and c % CHECKPOINT_EVERY == 0]
        sampled = [c for c in range(a, b) if c and c % SAMPLE_EVERY == 0]
        return validation, periodic, sampled

    intervals = list(zip(points, points[1:]))
    plain = [(tb - ta) / (b - a) for (ta, a), (tb, b) in intervals if not any(extras(a, b))]
    if not plain:
        raise RuntimeError("no interval of steps alone between the trainer's events: raise STEPS")
    pace = statistics.median(plain)
    phases = {"first_step_s": points[0][0] - start, "steps_s": 0.0, "validation_s": 0.0}
    phases.update(checkpoints_s=0.0, samples_s=0.0)
    for (ta, a), (tb, b) in intervals:
        validation, periodic, sampled = extras(a, b)
        if not any((validation, periodic, sampled)):
            phases["steps_s"] += tb - ta
            continue
        phases["steps_s"] += (b - a) * pace
        extra = tb - ta - (b - a) * pace
        for c in periodic:  # the checkpoint comes right after step c's report, then the samples
            spent = checkpoint_end(c) - (ta + (c - a) * pace)
            phases["checkpoints_s"] += spent
            extra -= spent
        phases["samples_s" if sampled else "validation_s"] += extra
    # after the last report: its samples, the final checkpoint, the evaluation loss, the outputs
    last_time, last = points[-1]
    samples = samples_end(last) if last % SAMPLE_EVERY == 0 or last == steps else last_time
    phases["samples_s"] += samples - last_time
    phases["checkpoints_s"] += checkpoint_end(last) - samples
    phases["after_last_step_s"] = end - checkpoint_end(last)
    phases["s_per_step_median"] = pace
    phases["intervals_timed"] = len(plain)
    return phases


def run_job(job, timed, device, loaders, base_dir):
    """One job through the executor; its row."""
    import comfy.model_management
    import folder_paths
    import torch

    from devkit.workflow import execution_error, run_prompt

    if job == "ours":
        prompt, settings = our_prompt(loaders)
    else:
        prompt, settings = builtin_prompt(loaders, our_prompt(loaders)[0])
    timed.events.clear()
    timed.peaks.clear()
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    offset = time.time() - time.perf_counter()
    sync()
    queued = time.perf_counter()
    executor, _ = run_prompt(prompt, server=timed)
    if not executor.success:
        raise RuntimeError(f"the {job} job failed: {execution_error(executor)}")
    events = list(timed.events)
    spans, total = node_spans(events, prompt, queued)
    peaks = node_peaks(events, dict(timed.peaks))
    trainer_id, _, trainer_start, trainer_end = next(s for s in spans if s[1] in TRAINERS)
    first_start = spans[0][2]
    images = 24 if job == "ours" else 20
    row = {
        "job": job,
        "settings": settings,
        "queue_to_models_loaded_s": first_start + duration(spans, LOADERS),
        "caching_s": duration(spans, CACHING),
        "caching_images": images,
    }
    row["caching_s_per_image"] = row["caching_s"] / images
    row["trainer_s"] = trainer_end - trainer_start
    output = folder_paths.get_output_directory()
    if job == "ours":
        run_dir = os.path.join(output, settings.get("run_name", "sks_dog"))
        with open(os.path.join(run_dir, "summary.json")) as f:
            summary = json.load(f)
        points = [
            (t - queued, data["step"])
            for t, event, data in events
            if event == "eridiffusion.progress" and str(data["node"]) == trainer_id
        ]
        if not torch.cuda.is_available():  # on the CPU every event is synchronous: the bar's too
            points += progress_bar(events, trainer_id, queued)
        points = dedupe(points)
        row.update(our_trainer_phases(points, trainer_start, trainer_end, run_dir, queued, offset, STEPS))
        samples = len(summary["samples"])
        checks = len(summary["validation"])
        row.update(
            samples_images=samples,
            samples_s_per_image=row["samples_s"] / samples,
            validation_checks=checks,
            validation_s_per_check=row["validation_s"] / checks,
            checkpoints_written=len(summary["checkpoints"]),
            checkpoint_s_each=row["checkpoints_s"] / len(summary["checkpoints"]),
            summary_seconds_per_step=summary["seconds_per_step"],
            loss_first_last=[summary["first_loss"], summary["last_loss"]],
            eval_loss_before_after=[summary["eval_loss_before"], summary["eval_loss_after"]],
            peak_memory_gib=summary["peak_memory_gib"],
            # the trainer's own figures: start to first step (build, evaluation, data), and the first
            # step itself (its CUDA graph capture included)
            setup_s=summary["setup_seconds"],
            first_step_own_s=summary["first_step_seconds"],
            setup_phases_s=summary["setup_phases"],
            between_steps_phases_s=summary.get("between_steps_phases"),
        )
    else:
        bar = dedupe(progress_bar(events, trainer_id, queued))
        paces = [(tb - ta) / (b - a) for (ta, a), (tb, b) in zip(bar[1:], bar[2:])]
        row.update(
            first_step_s=bar[0][0] - trainer_start,
            steps_s=bar[-1][0] - bar[0][0],
            s_per_step_median=statistics.median(paces),
            intervals_timed=len(paces),
            after_last_step_s=trainer_end - bar[-1][0],
            samples_s=None,
            validation_s=None,
            checkpoints_s=None,
            not_offered="ComfyUI 0.28's TrainLoraNode renders no samples, measures no validation loss and "
            "writes no checkpoints during training; its LoRA is written once, by SaveLoRA",
            peak_memory_gib=max(peaks.values(), default=None),  # (TimedServer resets the peak at each node)
        )
    row["save_lora_s"] = duration(spans, SAVING)
    row["final_image_s"] = duration(spans, FINAL_IMAGE)
    row["final_image_sampler_s"] = duration(spans, FINAL_SAMPLERS)
    accounted = ("queue_to_models_loaded_s", "caching_s", "trainer_s", "save_lora_s", "final_image_s")
    row["other_nodes_s"] = total - sum(row[k] for k in accounted)
    row["total_s"] = total
    used = device.node_peaks(spans, queued)
    row["nodes"] = [
        {"id": i, "class": kind, "s": round(end - start, 4), "peak_GiB": peaks.get(i), "device_used_GiB": used.get(i)}
        for i, kind, start, end in spans
    ]
    row["peak_GiB_by_phase"] = peaks_by_phase(spans, peaks)
    row["device_used_GiB_by_phase"] = peaks_by_phase(spans, used)
    comfy.model_management.unload_all_models()
    comfy.model_management.soft_empty_cache()
    return row


def progress_bar(events, node_id, queued):
    """[(seconds, value)] of the ComfyUI progress bar events of node `node_id`."""
    return [
        (t - queued, data["value"]) for t, event, data in events if event == "progress" and str(data["node"]) == node_id
    ]


def dedupe(points):
    """Points (seconds, step) in order, the latest per step kept, steps increasing."""
    latest = {}
    for t, step in sorted(points):
        latest[step] = t
    return [(t, step) for step, t in sorted(latest.items())]


PHASES = [
    ("queue → models loaded", "queue_to_models_loaded_s", None),
    ("caching", "caching_s", "caching_s_per_image"),
    ("trainer start → first step", "first_step_s", None),
    ("… of it, the first step itself (capture)", "first_step_own_s", None),
    ("training steps", "steps_s", "s_per_step_median"),
    ("samples", "samples_s", "samples_s_per_image"),
    ("validation", "validation_s", "validation_s_per_check"),
    ("checkpoints", "checkpoints_s", "checkpoint_s_each"),
    ("after the last step", "after_last_step_s", None),
    ("save LoRA", "save_lora_s", None),
    ("final image", "final_image_s", None),
    ("other nodes", "other_nodes_s", None),
    ("total", "total_s", None),
]


def table(rows):
    """A Markdown table of the phases, one column per job (s, and the per-unit figure)."""

    def cell(row, key, unit):
        if row.get(key) is None:
            return "— (none)" if key in ("samples_s", "validation_s", "checkpoints_s") else "—"
        text = f"{row[key]:.2f} s"
        return text + (f" ({row[unit]:.4f} s each)" if unit and row.get(unit) is not None else "")

    lines = ["| phase | " + " | ".join(r["job"] for r in rows) + " |", "|---" * (len(rows) + 1) + "|"]
    for label, key, unit in PHASES:
        lines.append(f"| {label} | " + " | ".join(cell(r, key, unit) for r in rows) + " |")
    return "\n".join(lines)


def main():
    stub_pyav()
    load_aimdo()
    from eridiffusion.runtime import start_host_in_temp_dir

    base_dir = start_host_in_temp_dir("eridiffusion-whole-job-")
    import torch

    from devkit.workflow import load_extension
    from eridiffusion.comfy_compat import host_version

    nodes = load_extension()
    nodes[TinyStack.NODE] = TinyStack
    timed = install_server()
    if TINY and MODEL == "flux":
        raise SystemExit("TINY=1 runs the tiny SDXL (MODEL=sdxl) and the tiny klein 9B (MODEL=klein)")
    if MODEL == "klein" and "builtin" in JOBS:
        raise SystemExit(
            "JOBS=builtin: the built-in's job is SDXL's and Flux's (the klein example samples through "
            "SamplerCustomAdvanced, which its job has no place for); JOBS=ours"
        )
    if CAP and not torch.cuda.is_available():
        raise SystemExit(f"CAP={CAP:g} emulates a smaller GPU: it needs one")
    model_config(MODEL)  # the architecture this host detects (fails early on an unknown model)
    started = time.time()
    # the model files are written before dynamic VRAM is on: ComfyUI's checkpoint save cannot read the
    # weights of a model that dynamic VRAM manages
    loaders = link_models(base_dir)
    photos = prepare_photos(os.path.join(base_dir, "input"))
    files_s = time.time() - started
    dynamic_vram = enable_dynamic_vram()
    reserved = emulate_card(CAP) if CAP else None
    device = DeviceMemory()
    rows = []
    for job in JOBS:
        try:
            row = run_job(job, timed, device, loaders, base_dir)
        except Exception as error:  # one failure must not hide the other job's figures
            import traceback

            traceback.print_exc()
            row = {"job": job, "error": repr(error)[:500]}
        rows.append(row)
        print("RESULT", json.dumps(row), flush=True)
    device.stop()
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    summary = {
        "date": time.strftime("%Y-%m-%d"),
        "model": MODEL if not TINY else f"tiny {MODEL} (devkit's tiny stack, CPU check)",
        "example": EXAMPLE,
        "cap_GiB": CAP or None,
        "reserved_for_comfyui_GiB": reserved,
        "device_memory_samples": len(device.samples),
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "torch": torch.__version__,
        "comfyui": host_version(),
        "dynamic_vram": dynamic_vram,
        "commit": os.environ.get("COMMIT") or commit.stdout.strip(),
        "job": {
            "steps": STEPS,
            "resolution": RESOLUTION,
            "rank": RANK,
            "learning_rate": LEARNING_RATE,
            "samples_every": SAMPLE_EVERY,
            "sample_prompts": 2,
            "sampling_steps": SAMPLING_STEPS,
            "validate_every": VALIDATE_EVERY,
            "checkpoint_every": CHECKPOINT_EVERY,
            "final_image_steps": SAMPLING_STEPS,
            "cfg": CFG,
            "ours_gradient_checkpointing": CHECKPOINTING,
            "builtin_gradient_checkpointing": BUILTIN_CHECKPOINTING,
        },
        "photos": photos,
        "example_file_current": example_file_current(),
        "model_files_s": files_s,
        "results": rows,
        "table": table([r for r in rows if "error" not in r]),
    }
    out = os.environ.get("OUT", "/tmp")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "whole_job.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(summary["table"])
    shutil.rmtree(os.path.join(base_dir, "output"), ignore_errors=True)


if __name__ == "__main__":
    main()
