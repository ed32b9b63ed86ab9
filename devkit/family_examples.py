"""The example workflows of the models trained most in 2026 (Z-Image, Flux.1-dev, Flux.2-klein,
Qwen-Image-Edit): each model loaded and sampled as ComfyUI's own template for it does (UNETLoader,
the text encoder loader of its type, VAELoader, the template's model and conditioning patches and
sampler settings), trained and tested in the four groups of example_graphs.training_graph."""

from devkit.example_graphs import KSAMPLER_SETTINGS, TRAINED_MODEL, Node, chain, test_columns, training_graph

# Where the loaders' outputs go: the diffusion model (UNETLoader, node 1), the text encoder and
# the VAE; the family's own nodes are numbered from 31 on.
LOADED = {"model": (1, 0), "clip": (31, 0), "vae": (32, 0)}
DOG = "a photo of sks dog wearing a red scarf, in the snow"
DOG_SAMPLES = "a photo of sks dog\na photo of sks dog on the beach"
# A 24 GB card: the models of 12B and more do not fit with their activations, so a VRAM budget
# a little under the card's memory (the setting's own advice) keeps the blocks that do not fit in
# CPU memory; the smaller ones fit whole with gradient checkpointing (on by default).
BUDGET_24GB = {"vram_budget_gib": 22.0}
SHOWN = ("EriDiffusion_OptimizerOptions", "EriDiffusion_MemoryOptions")
TRAINING = {"steps": 1500, "learning_rate": 1e-4, "rank": 16, "alpha": 16.0, "dtype": "bf16"}


def unet_loaders(unet, clip_loader, vae):
    """UNETLoader of the diffusion model `unet`, the text encoder loader `clip_loader` (a Node of id
    31) and VAELoader of `vae`: the Model group of a template that loads the files apart."""
    return [
        Node(1, "UNETLoader", {"unet_name": unet}),
        clip_loader,
        Node(32, "VAELoader", {"vae_name": vae}),
    ]


def model_note(files, memory):
    return (
        f"The files ComfyUI's own template for this model loads: {files}. The MODEL is trained; the text "
        f"encoder and VAE encode the dataset and draw the samples.\n{memory}"
    )


FITS = (
    "24 GB card: the bf16 weights take about {} GB; keep MemoryOptions' gradient_checkpointing on, and set "
    "its vram_budget_gib to 22 if a step runs out of memory (block swap)."
)
SWAPS = (
    "24 GB card: the bf16 weights take about {} GB, so MemoryOptions' vram_budget_gib is 22: the blocks that "
    "do not fit stay in CPU memory and are copied in ahead of the compute (0: no budget, on a larger card)."
)


def z_image():
    """Z-Image (image_z_image.json): ModelSamplingAuraFlow shift 3, res_multistep / simple, 25 steps
    at cfg 4."""
    sampling = {"steps": 25, "cfg": 4.0, "sampler_name": "res_multistep", "scheduler": "simple"}
    shift = Node(33, "ModelSamplingAuraFlow", {"shift": 3.0})
    test = test_columns(DOG, 1024, sampling, LOADED, latent="EmptySD3LatentImage", negative="", model=[shift])
    return training_graph(
        None,
        1024,
        DOG,
        DOG_SAMPLES,
        model_note(
            "z_image_bf16.safetensors (Z-Image base) in models/diffusion_models, qwen_3_4b.safetensors "
            "(type lumina2) in models/text_encoders, ae.safetensors in models/vae",
            FITS.format(12),
        ),
        loader=unet_loaders(
            "z_image_bf16.safetensors",
            Node(31, "CLIPLoader", {"clip_name": "qwen_3_4b.safetensors", "type": "lumina2"}),
            "ae.safetensors",
        ),
        trainer=TRAINING,
        options=SHOWN,
        sampling=sampling,
        sources=LOADED,
        test=test,
    )


def flux_dev():
    """Flux.1-dev (flux_dev_full_text_to_image.json): the prompt's guidance 3.5 (FluxGuidance), its
    zeroed conditioning as the negative, euler / simple, 20 steps at cfg 1."""
    sampling = {"steps": 20, "cfg": 1.0, "sampler_name": "euler", "scheduler": "simple"}
    guidance = Node(33, "FluxGuidance", {"guidance": 3.5})
    test = test_columns(DOG, 1024, sampling, LOADED, latent="EmptySD3LatentImage", negative=None, positive=[guidance])
    encoders = {"clip_name1": "clip_l.safetensors", "clip_name2": "t5xxl_fp16.safetensors", "type": "flux"}
    return training_graph(
        None,
        1024,
        DOG,
        DOG_SAMPLES,
        model_note(
            "flux1-dev.safetensors in models/diffusion_models, clip_l.safetensors and t5xxl_fp16.safetensors "
            "(type flux) in models/text_encoders, ae.safetensors in models/vae",
            SWAPS.format(24),
        ),
        loader=unet_loaders("flux1-dev.safetensors", Node(31, "DualCLIPLoader", encoders), "ae.safetensors"),
        trainer={**TRAINING, **BUDGET_24GB},
        options=SHOWN,
        sampling=sampling,
        sources=LOADED,
        test=test,
    )


def klein_test(prompt, resolution, sampling, sources):
    """The Test group of image_flux2_klein_text_to_image.json: CFGGuider (the trained MODEL, the prompt
    and an empty negative one) sampled by SamplerCustomAdvanced with RandomNoise, KSamplerSelect and
    Flux2Scheduler on an EmptyFlux2LatentImage."""
    size = {"width": resolution, "height": resolution}
    inputs = [
        Node(9, "CLIPTextEncode", {"text": prompt}, {"clip": sources["clip"]}, title="Positive"),
        Node(10, "CLIPTextEncode", {"text": ""}, {"clip": sources["clip"]}, title="Negative"),
        Node(11, "EmptyFlux2LatentImage", {**size, "batch_size": 1}),
    ]
    sampler = [
        Node(33, "RandomNoise", {"noise_seed": 42}),
        Node(34, "KSamplerSelect", {"sampler_name": sampling["sampler_name"]}),
        Node(35, "Flux2Scheduler", {"steps": sampling["steps"], **size}),
        Node(
            36, "CFGGuider", {"cfg": sampling["cfg"]}, {"model": TRAINED_MODEL, "positive": (9, 0), "negative": (10, 0)}
        ),
    ]
    parts = {"noise": (33, 0), "sampler": (34, 0), "sigmas": (35, 0), "guider": (36, 0), "latent_image": (11, 0)}
    outputs = [
        Node(12, "SamplerCustomAdvanced", {}, parts),
        Node(13, "VAEDecode", {}, {"samples": (12, 0), "vae": sources["vae"]}),
        Node(14, "SaveImage", {"filename_prefix": "eridiffusion/sks_dog"}, {"images": (13, 0)}),
    ]
    return [inputs, sampler, outputs]


def flux2_klein():
    """Flux.2-klein 4B base (image_flux2_klein_text_to_image.json's base model): cfg 5, euler, 20 steps
    (Flux2Scheduler in the Test group; the samples take the simple schedule)."""
    sampling = {"steps": 20, "cfg": 5.0, "sampler_name": "euler", "scheduler": "simple"}
    return training_graph(
        None,
        1024,
        DOG,
        DOG_SAMPLES,
        model_note(
            "flux-2-klein-base-4b.safetensors (the base model, not the 4-step distilled one) in "
            "models/diffusion_models, qwen_3_4b.safetensors (type flux2) in models/text_encoders, "
            "flux2-vae.safetensors in models/vae",
            FITS.format(8),
        ),
        loader=unet_loaders(
            "flux-2-klein-base-4b.safetensors",
            Node(31, "CLIPLoader", {"clip_name": "qwen_3_4b.safetensors", "type": "flux2"}),
            "flux2-vae.safetensors",
        ),
        trainer=TRAINING,
        options=SHOWN,
        sampling=sampling,
        sources=LOADED,
        test=klein_test(DOG, 1024, sampling, LOADED),
    )


EDIT_NOTE = (
    "folder: the edited images (targets) inside ComfyUI's input/ folder, each with its instruction as a "
    "caption .txt of the same name, and its reference image under the same name in control/ "
    "(00.jpg ↔ control/00.png; control_2/ and control_3/ add a second and third). CacheLatents "
    "encodes targets, references and instructions once and reuses them on the next run."
)
EDIT_TEST_NOTE = (
    "Edits the Reference image (pick one in LoadImage) with the trained MODEL, as ComfyUI's Qwen-Image-Edit "
    "2511 template does without its Lightning LoRA: change the instruction to try the LoRA. The saved file "
    "also loads in a stock LoraLoader."
)
EDIT = "colorize the photo"
EDIT_SAMPLES = f"{EDIT} --ref edit_pairs/control/00.png\n{EDIT} --ref edit_pairs/control/01.png"


def edit_test(prompt, sampling, sources):
    """The Test group of image_qwen_image_edit_2511.json without its Lightning LoRA: the reference scaled
    by FluxKontextImageScale and encoded with the instruction by TextEncodeQwenImageEditPlus (an empty
    instruction the negative), each through FluxKontextMultiReferenceLatentMethod; the trained MODEL
    through ModelSamplingAuraFlow 3.1 and CFGNorm into KSampler, from the reference's latent."""
    encode = {"clip": sources["clip"], "vae": sources["vae"], "image1": (34, 0)}
    image = [
        Node(33, "LoadImage", {"image": "edit_pairs/control/00.png"}, title="Reference"),
        Node(34, "FluxKontextImageScale", {}, {"image": (33, 0)}),
        Node(11, "VAEEncode", {}, {"pixels": (34, 0), "vae": sources["vae"]}),
    ]
    method = {"reference_latents_method": "index_timestep_zero"}
    conditioning = [
        Node(9, "TextEncodeQwenImageEditPlus", {"prompt": prompt}, dict(encode), title="Positive"),
        Node(10, "TextEncodeQwenImageEditPlus", {"prompt": ""}, dict(encode), title="Negative"),
        Node(35, "FluxKontextMultiReferenceLatentMethod", method, {"conditioning": (9, 0)}),
        Node(36, "FluxKontextMultiReferenceLatentMethod", method, {"conditioning": (10, 0)}),
    ]
    model = [Node(37, "ModelSamplingAuraFlow", {"shift": 3.1}), Node(38, "CFGNorm", {"strength": 1.0})]
    links = {"positive": (35, 0), "negative": (36, 0), "latent_image": (11, 0)}
    outputs = [
        *model,
        Node(12, "KSampler", {"seed": 42, **sampling}, {"model": chain(model, "model", TRAINED_MODEL), **links}),
        Node(13, "VAEDecode", {}, {"samples": (12, 0), "vae": sources["vae"]}),
        Node(14, "SaveImage", {"filename_prefix": "eridiffusion/edit"}, {"images": (13, 0)}),
    ]
    return [image, conditioning, outputs]


def qwen_image_edit():
    """Qwen-Image-Edit 2511 (image_qwen_image_edit_2511.json): edit pairs with a reference each, samples
    and the test image at the template's 40 steps, cfg 4, euler / simple."""
    sampling = {"steps": 40, "cfg": 4.0, "sampler_name": "euler", "scheduler": "simple"}
    encoder = {"clip_name": "qwen_2.5_vl_7b_fp8_scaled.safetensors", "type": "qwen_image"}
    return training_graph(
        None,
        1024,
        EDIT,
        EDIT_SAMPLES,
        model_note(
            "qwen_image_edit_2511_bf16.safetensors in models/diffusion_models, "
            "qwen_2.5_vl_7b_fp8_scaled.safetensors (type qwen_image) in models/text_encoders, "
            "qwen_image_vae.safetensors in models/vae",
            SWAPS.format(41),
        ),
        loader=unet_loaders(
            "qwen_image_edit_2511_bf16.safetensors", Node(31, "CLIPLoader", encoder), "qwen_image_vae.safetensors"
        ),
        trainer={**TRAINING, **BUDGET_24GB},
        options=SHOWN,
        sampling=sampling,
        sources=LOADED,
        dataset={"folder": "edit_pairs", "trigger_word": ""},
        data_note=EDIT_NOTE,
        test=edit_test(EDIT, sampling, LOADED),
        test_note=EDIT_TEST_NOTE,
    )


CLIP = "a video of sks dog running through the snow, wearing a red scarf"
CLIP_SAMPLES = "a video of sks dog walking on the beach"
# Wan's negative prompt, as its own templates (and Wan's code) write it: what the model was trained to
# steer away from (oversaturated, static, blurry frames, bad hands and faces ...).
WAN_NEGATIVE = (
    "色调艳丽，过曝，静态，细节模糊不清，字幕，风格，作品，画作，画面，静止，整体发灰，最差质量，低质量，JPEG压缩残留，"
    "丑陋的，残缺的，多余的手指，画得不好的手部，画得不好的脸部，畸形的，毁容的，形态畸形的肢体，手指融合，静止不动的画面，"
    "杂乱的背景，三条腿，背景人很多，倒着走"
)
CLIPS_NOTE = (
    "folder: your clips (mp4, webm, gif, or a folder of frames) inside ComfyUI's input/ folder, each with a "
    "caption .txt of the same name. DatasetMediaOptions' frames: the frames of each training clip, taken at "
    "fps (Wan: 4k+1 at 16 fps); a shorter clip is an error. CacheLatents encodes them once at its resolution "
    "and reuses them on the next run."
)
EXPERTS_TRAIN_NOTE = (
    "LoRATrainer trains both experts in one run: model is the high-noise one, TrainingObjective's "
    "low_noise_model the low-noise one; each step trains the expert whose noise range its noise level "
    "falls in (TrainingObjective's expert_boundary), and each expert's LoRA is saved by its own SaveLoRA. "
    "Change steps, learning_rate and rank first; the samples are drawn with both experts, as the Test group "
    "does."
)
EXPERTS_TEST_NOTE = (
    "Draws one clip with both trained experts, as ComfyUI's Wan 2.2 14B template does: the high-noise one "
    "takes steps 0-10 from the noise, the low-noise one 10-20. Change the prompt to try the LoRAs; the saved "
    "files also load in stock LoraLoaderModelOnly nodes, one on each expert."
)
WAN_MODEL_NOTE = (
    "Both experts of Wan 2.2 {} A14B, loaded as ComfyUI's own template loads them, in their fp16 files (train "
    "on those, not the fp8_scaled ones): {}. Both MODELs are trained; the text encoder and VAE encode the clips "
    "and draw the samples.\n{}"
)
# The low-noise expert's loader, the trained low-noise MODEL (LoRATrainer's output 5) and the Test
# group's nodes beside test_columns' ids.
LOW_NOISE_LOADER, TRAINED_LOW_NOISE = 33, (5, 5)


START_IMAGE = "dreambooth_dog/00.jpg"  # in ComfyUI's input/ folder: the Test group's first frame
I2V_TEST_NOTE = (
    "Draws one clip from the Start image (pick yours in LoadImage) with both trained experts, as ComfyUI's Wan "
    "2.2 14B image-to-video template does: WanImageToVideo encodes it as the first frame, the high-noise expert "
    "takes steps 0-10, the low-noise one 10-20; the samples during training start from it too. The saved files "
    "also load in stock LoraLoaderModelOnly nodes, one on each expert."
)


def wan_experts_test(prompt, length, sampling, sources, start_image=False):
    """The Test group of video_wan2_2_14B_t2v.json (i2v.json with `start_image`) without its Lightning LoRAs:
    ModelSamplingSD3 shift 8 on each trained expert, the prompt and Wan's negative one, an
    EmptyHunyuanLatentVideo (WanImageToVideo of a LoadImage, which conditions both prompts on it);
    KSamplerAdvanced of the high-noise expert (steps 0-10, adding the noise and leaving what is left) into
    one of the low-noise expert (10 to the end), decoded, made a 16 fps video and saved."""
    shared = {k: sampling[k] for k in KSAMPLER_SETTINGS}
    size = {"width": 640, "height": 640, "length": length, "batch_size": 1}
    inputs = [
        Node(9, "CLIPTextEncode", {"text": prompt}, {"clip": sources["clip"]}, title="Positive"),
        Node(10, "CLIPTextEncode", {"text": WAN_NEGATIVE}, {"clip": sources["clip"]}, title="Negative"),
    ]
    if start_image:
        frame = {"positive": (9, 0), "negative": (10, 0), "vae": sources["vae"], "start_image": (38, 0)}
        inputs += [
            Node(38, "LoadImage", {"image": START_IMAGE}, title="Start image"),
            Node(11, "WanImageToVideo", size, frame),
        ]
        conditioning, latent = {"positive": (11, 0), "negative": (11, 1)}, (11, 2)
    else:
        inputs.append(Node(11, "EmptyHunyuanLatentVideo", size))
        conditioning, latent = {"positive": (9, 0), "negative": (10, 0)}, (11, 0)
    high = Node(34, "ModelSamplingSD3", {"shift": 8.0}, {"model": TRAINED_MODEL}, title="High-noise expert")
    low = Node(35, "ModelSamplingSD3", {"shift": 8.0}, {"model": TRAINED_LOW_NOISE}, title="Low-noise expert")
    half = sampling["steps"] // 2
    first = {"add_noise": "enable", "noise_seed": 42, **shared, "start_at_step": 0, "end_at_step": half}
    second = {"add_noise": "disable", "noise_seed": 0, **shared, "start_at_step": half, "end_at_step": 10000}
    samplers = [
        Node(
            12,
            "KSamplerAdvanced",
            {**first, "return_with_leftover_noise": "enable"},
            {"model": (34, 0), **conditioning, "latent_image": latent},
            title="High noise: steps 0-10",
        ),
        Node(
            36,
            "KSamplerAdvanced",
            {**second, "return_with_leftover_noise": "disable"},
            {"model": (35, 0), **conditioning, "latent_image": (12, 0)},
            title="Low noise: steps 10-20",
        ),
    ]
    outputs = [
        Node(13, "VAEDecode", {}, {"samples": (36, 0), "vae": sources["vae"]}),
        Node(37, "CreateVideo", {"fps": 16.0}, {"images": (13, 0)}),
        Node(14, "SaveVideo", {"filename_prefix": "eridiffusion/sks_dog"}, {"video": (37, 0)}),
    ]
    return [inputs, [high, low, *samplers], outputs]


def wan22_experts(task):
    """Wan 2.2 A14B of `task` ("t2v" or "i2v": video_wan2_2_14B_<task>.json's 20-step graph, without its
    Lightning LoRAs): both experts loaded apart and trained in one run on clips of 33 frames at 16 fps,
    samples and the test clip at the template's euler / simple, 20 steps, cfg 3.5 (the samples 33 frames,
    the test clip 81). Image-to-video trains with CacheMediaOptions' start_image (each clip's first frame) and
    starts its samples and test clip from the Test group's Start image."""
    sampling = {"steps": 20, "cfg": 3.5, "sampler_name": "euler", "scheduler": "simple"}
    high, low = (f"wan2.2_{task}_{expert}_noise_14B_fp16.safetensors" for expert in ("high", "low"))
    experts = (
        f"{high} and {low} in models/diffusion_models, umt5_xxl_fp16.safetensors (type wan) in "
        "models/text_encoders, wan_2.1_vae.safetensors in models/vae"
    )
    loaders = unet_loaders(
        high,
        Node(31, "CLIPLoader", {"clip_name": "umt5_xxl_fp16.safetensors", "type": "wan"}),
        "wan_2.1_vae.safetensors",
    )
    loaders[0].title = "High-noise expert"
    loaders.insert(1, Node(LOW_NOISE_LOADER, "UNETLoader", {"unet_name": low}, title="Low-noise expert"))
    i2v = task == "i2v"
    from_image = {"cache": {"start_image": True}, "start_image": (38, 0)} if i2v else {}
    return training_graph(
        None,
        512,
        CLIP,
        CLIP_SAMPLES,
        WAN_MODEL_NOTE.format("I2V" if i2v else "T2V", experts, SWAPS.format(57)),
        loader=loaders,
        trainer={**TRAINING, **BUDGET_24GB},
        options=SHOWN,
        sampling={**sampling, "frames": 33, "every": 250},
        sources=LOADED,
        low_noise_model=(LOW_NOISE_LOADER, 0),
        dataset={"folder": "sks_dog_clips", "frames": 33, "fps": 16.0},
        data_note=CLIPS_NOTE,
        train_note=EXPERTS_TRAIN_NOTE,
        test=wan_experts_test(CLIP, 81, sampling, LOADED, start_image=i2v),
        test_note=I2V_TEST_NOTE if i2v else EXPERTS_TEST_NOTE,
        **from_image,
    )


FAMILY_EXAMPLES = {
    "z_image_lora.json": z_image,
    "flux_dev_lora.json": flux_dev,
    "flux2_klein_lora.json": flux2_klein,
    "qwen_image_edit_lora.json": qwen_image_edit,
    "wan22_t2v_experts_lora.json": lambda: wan22_experts("t2v"),
    "wan22_i2v_experts_lora.json": lambda: wan22_experts("i2v"),
}
# The oldest tested ComfyUI that writes each example's file as committed, where that is newer than the
# oldest tested one. Flux.2-klein's text encoder and FluxKontextMultiReferenceLatentMethod's
# index_timestep_zero came after 0.3.75 (whose CFGNorm also lacks pre_cfg), so those two neither run nor
# are written the same there; the Wan 2.2 ones run on 0.3.75 (tests/nodes/test_family_workflows.py), but
# CreateVideo's bit_depth, which the files written on 0.28 hold, came after it.
SINCE = {
    "flux2_klein_lora.json": "0.28.0",
    "qwen_image_edit_lora.json": "0.28.0",
    "wan22_t2v_experts_lora.json": "0.28.0",
    "wan22_i2v_experts_lora.json": "0.28.0",
}
