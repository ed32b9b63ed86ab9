"""The model families EriDiffusion trains, keyed by ComfyUI's model config class, with each
family's training defaults (adapter targets, timestep sampling) and where those come from."""

import logging
from dataclasses import replace

import comfy.model_sampling

from ...errors import EriDiffusionError
from .family_row import (
    DIT_TARGETS,
    EPS_V,
    FLUX_SHIFT,
    LOGIT_NORMAL,
    UNET_TARGETS,
    UNIFORM,
    WAN22_EXPERT_BOUNDARY,
    Family,
    flow_shift,
    timestep_sampling,
)
from .objective import is_flow
from .video_families import VIDEO_2026_FAMILIES

KOHYA_FLUX = "kohya sd-scripts `flux_shift`"

FAMILIES = (
    Family("SD 1.5", ("SD15",), UNET_TARGETS, UNIFORM, "kohya sd-scripts", prediction=EPS_V),
    Family(
        "SDXL",
        ("SDXL", "SSD1B", "Segmind_Vega", "KOALA_700M", "KOALA_1B"),
        UNET_TARGETS,
        UNIFORM,
        "kohya sd-scripts",
        prediction=EPS_V,
    ),
    # SD 2.x: 512 px models predict ε, 768 px models v (ComfyUI reads which from the file).
    Family(
        "SD 2.x", ("SD20",), UNET_TARGETS, UNIFORM, "kohya sd-scripts (--v2, --v_parameterization)", prediction=EPS_V
    ),
    Family("SDXL Refiner", ("SDXLRefiner",), UNET_TARGETS, UNIFORM, "kohya sd-scripts (as SDXL)", prediction=EPS_V),
    Family(
        "SD3 / SD3.5 (Medium, Large, Large Turbo)",
        ("SD3",),
        DIT_TARGETS,
        LOGIT_NORMAL,
        "SD3 paper; diffusers' SD3 LoRA trainer",
    ),
    # Flux.1 dev and HunyuanVideo are guidance-distilled; kohya, ai-toolkit and musubi-tuner train them
    # with guidance 1.0.
    Family("Flux.1 dev (and Flex-style variants)", ("Flux",), DIT_TARGETS, FLUX_SHIFT, KOHYA_FLUX, guidance=1.0),
    # FLUX.1 Fill reads the masked image and its mask on its input channels (CacheLatents' inpaint).
    Family("Flux.1 Fill (inpainting)", ("FluxInpaint",), DIT_TARGETS, FLUX_SHIFT, KOHYA_FLUX, guidance=1.0),
    Family("Flux.1 Kontext (edit pairs)", ("Flux",), DIT_TARGETS, FLUX_SHIFT, KOHYA_FLUX, guidance=1.0),
    Family("Flux.1 schnell", ("FluxSchnell",), DIT_TARGETS, FLUX_SHIFT, KOHYA_FLUX),
    Family("Flux.2", ("Flux2",), DIT_TARGETS, FLUX_SHIFT, "Flux.1's rule (kohya `flux_shift`)", latent_patch=1),
    # FLUX.2 [klein] loads as Flux2 (no guidance embedding) with a Qwen3 encoder (ComfyUI 0.28's klein_te).
    Family("Flux.2-klein 4B", ("Flux2",), DIT_TARGETS, FLUX_SHIFT, "as Flux.2 (Flux.1's rule)", latent_patch=1),
    Family("Flux.2-klein 9B", ("Flux2",), DIT_TARGETS, FLUX_SHIFT, "as Flux.2 (Flux.1's rule)", latent_patch=1),
    Family("Chroma", ("Chroma",), DIT_TARGETS, FLUX_SHIFT, "Flux.1's rule (Chroma is a Flux.1-schnell derivative)"),
    Family("HiDream-I1", ("HiDream",), DIT_TARGETS, flow_shift(3.0), "HiDream's own flow shift"),
    Family("Lumina Image 2.0", ("Lumina2",), DIT_TARGETS, flow_shift(6.0), "Lumina 2's own flow shift"),
    Family("Z-Image", ("ZImage",), DIT_TARGETS, flow_shift(3.0), "Z-Image's own flow shift"),
    Family("Qwen-Image", ("QwenImage",), DIT_TARGETS, flow_shift(2.2), "musubi-tuner"),
    # Qwen-Image-Edit loads as QwenImage; its captions are shown the references (TextEncodeQwenImageEditPlus).
    Family(
        "Qwen-Image-Edit (2509-style, up to 3 references)", ("QwenImage",), DIT_TARGETS, flow_shift(2.2), "musubi-tuner"
    ),
    Family("OmniGen2", ("Omnigen2",), DIT_TARGETS, LOGIT_NORMAL, "OmniGen2's own trainer"),
    Family("HunyuanImage 2.1", ("HunyuanImage21",), DIT_TARGETS, flow_shift(5.0), "musubi-tuner", latent_patch=1),
    Family("AuraFlow", ("AuraFlow",), DIT_TARGETS, LOGIT_NORMAL, "SimpleTuner (as SD3)"),
    Family(
        "PixArt-α / Σ", ("PixArtAlpha", "PixArtSigma"), DIT_TARGETS, UNIFORM, "PixArt's train scripts", prediction=EPS_V
    ),
    Family(
        "Wan 2.1 text-to-video (and Wan 2.2 14B)",
        ("WAN21_T2V",),
        DIT_TARGETS,
        flow_shift(3.0),
        "musubi-tuner",
        expert_boundary=WAN22_EXPERT_BOUNDARY,
    ),
    Family("Wan 2.1 VACE", ("WAN21_Vace",), DIT_TARGETS, flow_shift(3.0), "musubi-tuner"),
    Family("Wan 2.2 TI2V 5B", ("WAN22_T2V",), DIT_TARGETS, flow_shift(3.0), "musubi-tuner"),
    Family(
        "LTX-Video",
        ("LTXV",),
        DIT_TARGETS,
        FLUX_SHIFT,
        "LTX-Video-Trainer (shifted logit-normal)",
        latent_patch=1,
        copies_saved_activations=True,
    ),
    Family("HunyuanVideo", ("HunyuanVideo",), DIT_TARGETS, flow_shift(7.0), "musubi-tuner", guidance=1.0),
    Family("HunyuanVideo 1.5", ("HunyuanVideo15",), DIT_TARGETS, flow_shift(7.0), "musubi-tuner", latent_patch=1),
    # Kandinsky 5 samples with shift 10 (its own scheduler_scale, ComfyUI's sampling_settings);
    # musubi-tuner's Kandinsky 5 recipe trains with shift 5.
    Family("Kandinsky 5.0 Video (Lite, Pro)", ("Kandinsky5",), DIT_TARGETS, flow_shift(5.0), "musubi-tuner"),
    # LTX-2 is an audio-video model; ComfyUI runs it video-only when the latent is a plain video latent
    # (no audio tokens: the audio stream and the audio-video cross-attention are skipped), which is how it
    # trains without an audio VAE; with one (CacheLatents' audio_vae) each clip's sound trains too, packed
    # as the sampler packs LTXVConcatAVLatent's latent. Its blocks write in place into activations autograd
    # saved, as LTX-Video's do.
    Family(
        "LTX-2 (video, and its audio with the audio VAE)",
        ("LTXAV",),
        DIT_TARGETS,
        FLUX_SHIFT,
        "LTX-2's ltx-trainer (shifted logit-normal)",
        latent_patch=1,
        copies_saved_activations=True,
    ),
    # The image families ComfyUI 0.2x added. kohya's Anima trainer defaults to `sigmoid` sampling at scale 1,
    # which is logit-normal(0, 1); LongCat-Image's pipeline shifts by the image size as Flux.1's does.
    Family(
        "Kandinsky 5.0 Image Lite",
        ("Kandinsky5Image",),
        DIT_TARGETS,
        flow_shift(3.0),
        "Kandinsky 5 Image's own flow shift",
    ),
    Family("LongCat-Image", ("LongCatImage",), DIT_TARGETS, FLUX_SHIFT, "Flux.1's rule (kohya `flux_shift`)"),
    Family(
        "ERNIE-Image", ("ErnieImage",), DIT_TARGETS, flow_shift(3.0), "ERNIE-Image's own flow shift", latent_patch=1
    ),
    Family("Anima", ("Anima",), DIT_TARGETS, LOGIT_NORMAL, "kohya sd-scripts (`sigmoid`)"),
    # 2026 image DiTs (each built by its devkit/tiny_<family>.py).
    # Krea 2 samples with ComfyUI's Flux model sampling at mu 1.15, which is Flux.1's size rule at 1 MP
    # (4096 tokens): trained with that rule, as for Flux.1.
    Family("Krea 2", ("Krea2",), DIT_TARGETS, FLUX_SHIFT, "ComfyUI's Flux sampling (Flux.1's size rule)"),
    # JoyImage has no trainer of its own published; its flow shift is ComfyUI's sampling_settings (1.5).
    Family("JoyImage", ("JoyImage",), DIT_TARGETS, flow_shift(1.5), "JoyImage's own flow shift"),
    # Cosmos-Predict2 is a rectified flow that ComfyUI writes in EDM's σ (σ = t / (1 - t), up to 80), so
    # the noise level is drawn over the flow time t its model_sampling counts in: logit-normal, as its
    # sibling Anima is trained.
    Family(
        "Cosmos-Predict2 text-to-image",
        ("CosmosT2IPredict2",),
        DIT_TARGETS,
        LOGIT_NORMAL,
        "kohya sd-scripts' Anima (`sigmoid`)",
        prediction="rectified flow (EDM-scaled σ)",
    ),
    # Hunyuan-DiT v1.2 predicts v on a discrete DDPM schedule; its own train scripts draw timesteps
    # uniformly. (v1.0/1.1, HunyuanDiT1, have another schedule and size conditions, untested here.)
    Family(
        "Hunyuan-DiT v1.2",
        ("HunyuanDiT",),
        DIT_TARGETS,
        UNIFORM,
        "Hunyuan-DiT's train scripts",
        prediction="v (discrete)",
    ),
    # Ideogram 4 samples unshifted (ComfyUI's sampling_settings: shift 1.0) and has no published
    # trainer: logit-normal(0, 1), SD3's rule for an unshifted flow. Its tokens are latent pixels of
    # FLUX.2's 2x2-packed latent.
    Family("Ideogram 4", ("Ideogram4",), DIT_TARGETS, LOGIT_NORMAL, "SD3's rule (flow, no shift)", latent_patch=1),
    # (end of 2026 image DiTs)
    # 2026 variants of existing rows and pixel-space models (devkit/tiny_<family>.py of each).
    # Chroma Radiance is Chroma in pixel space, trained by Chroma's rule (Flux.1's size-dependent
    # shift): the shift counts its 16x16-pixel patches, the model's own patch_size, so 1024 px gives
    # 4096 tokens and the mu 1.15 ComfyUI samples Chroma with.
    Family(
        "Chroma Radiance",
        ("ChromaRadiance",),
        DIT_TARGETS,
        FLUX_SHIFT,
        "Flux.1's rule, as Chroma",
        latent_patch=16,
    ),
    # Z-Image pixel space keeps ZImage's sampling_settings (flow, shift 3); its forward turns the
    # decoder's x0 into the velocity ComfyUI samples with, so it trains as a rectified-flow model.
    Family(
        "Z-Image pixel space",
        ("ZImagePixelSpace",),
        DIT_TARGETS,
        flow_shift(3.0),
        "Z-Image's own flow shift (ComfyUI keeps ZImage's)",
    ),
    # Boogu-Image, an OmniGen2 derivative, trains at the flow shift ComfyUI samples it with (its
    # sampling_settings), from captions (no reference images: the empty list OmniGen2's forward takes).
    Family("Boogu-Image", ("Boogu",), DIT_TARGETS, flow_shift(3.16), "ComfyUI's sampling shift for Boogu"),
    # Lens: ComfyUI samples it with Flux's model sampling at the fixed mu 1.829 (shift e^1.829 = 6.23),
    # the reference pipeline's value from 4300 image tokens (1440 px) up, and trains at that shift.
    # One token per latent pixel of the FLUX.2 VAE's packed latents.
    Family("Lens", ("Lens",), DIT_TARGETS, flow_shift(6.23), "ComfyUI's sampling shift (mu 1.829)", latent_patch=1),
    # PixelDiT samples at flow shift 4 (its 1024 px stage; ComfyUI's sampling_settings). Its blocks
    # modulate normalized activations in place (apply_adaln_: x.addcmul_(x, scale), which autograd
    # saved) and add the pixel MLP into x in place after norm2 saved it.
    Family(
        "PixelDiT",
        ("PixelDiTT2I",),
        DIT_TARGETS,
        flow_shift(4.0),
        "PixelDiT's 1024 px flow shift (ComfyUI's)",
        copies_saved_activations=True,
    ),
    # (end of 2026 variants)
    *VIDEO_2026_FAMILIES,
    # HiDream-O1-Image (devkit/tiny_hidream_o1.py): pixel space in 32x32-pixel patches, its own flow shift
    # of 3 (ComfyUI's sampling_settings; no trainer of its own is published), with noise 8x the pixels'
    # scale (its noise_scale, which training takes through the model's own noise_scaling). From captions:
    # no reference images. It caches its prompt's keys and values across calls, which a patcher with
    # adapters computes afresh at every call instead (comfy_compat.prefix_cache_dropped). Its repeated
    # blocks are its Qwen3-VL decoder's, one level down (language_model.layers), which the "blocks" preset
    # (the diffusion model's own ModuleLists) does not reach: every linear layer trains.
    Family(
        "HiDream-O1-Image",
        ("HiDreamO1",),
        "all-linear",
        flow_shift(3.0),
        "HiDream-O1's own flow shift",
        latent_patch=32,
    ),
    # ACE-Step 1.5 (devkit/tiny_ace_step.py): text-to-music from audio files, conditioned as the host's
    # TextEncodeAceStepAudio1.5 node conditions it (tags, lyrics, metadata) without LM audio codes, as
    # ACE-Step's own LoRA trainer trains and its LoRAs are used. Noise levels are drawn as that trainer
    # draws them: t = sigmoid(N(-0.4, 1)), the model's own timestep_mu / timestep_sigma, unshifted. One
    # token per two latent frames (its patch_size 2). Its repeated blocks sit one level down
    # (decoder.layers), which the "blocks" preset does not reach; ACE-Step's trainer adapts the
    # attention projections (q/k/v/o_proj), as the "attention" preset does.
    Family(
        "ACE-Step 1.5",
        ("ACEStep15",),
        UNET_TARGETS,
        timestep_sampling("logit_normal", logit_mean=-0.4, logit_std=1.0),
        "ACE-Step 1.5's LoRA trainer (timestep_mu -0.4, sigma 1)",
        medium="audio",
    ),
    # Upstream ComfyUI lacks these in 0.3.75: the row stays, and the error says so.
    Family("Sana", ("Sana", "SanaMS"), DIT_TARGETS, FLUX_SHIFT, "—"),
    Family("Kolors", ("Kolors",), UNET_TARGETS, UNIFORM, "—", prediction=EPS_V),
)


# Model classes ComfyUI loads that are not diffusion models one trains from captioned images or
# clips, and what each is instead.
NOT_TRAINABLE = {
    "LotusD": "a depth and normal estimator",
    "DepthAnything3": "a depth estimator",
    "RT_DETR_v4": "an object detector",
    "SAM3": "a segmentation model",
    "SAM31": "a segmentation model",
    "SD_X4Upscaler": "an upscaler, conditioned on a low-resolution image",
    "SeedVR2": "a video restoration (upscaling) model, conditioned on the video it restores",
    "HunyuanVideo15_SR_Distilled": "a video super-resolution model, conditioned on the video it enlarges",
    "Stable_Cascade_B": "Stable Cascade's decoder stage, conditioned on stage C's latents (train stage C)",
    "Stable_Zero123": "a novel-view model, conditioned on an image and camera angles",
    "SV3D_u": "a 3D orbit model, conditioned on an image",
    "SV3D_p": "a 3D orbit model, conditioned on an image and camera poses",
    "SVD_img2vid": "an image-to-video model without text, conditioned on its first frame",
    "Hunyuan3Dv2": "a 3D shape model",
    "Hunyuan3Dv2mini": "a 3D shape model",
    "Hunyuan3Dv2_1": "a 3D shape model",
    "TripoSplat": "a 3D Gaussian-splat model",
    "StableAudio": "an audio model (training from audio files is not supported yet)",
    "StableAudio3": "an audio model (training from audio files is not supported yet)",
    "ACEStep": "an audio model (training from audio files is not supported yet)",
}

# Classes that are such models, but that training would get silently wrong here, and why.
NOT_YET: dict[str, str] = {}

_told_generic: set[str] = set()  # the classes whose generic training has been announced in this process


def class_status(name):
    """What EriDiffusion does with ComfyUI model class `name`: ("row", Family), ("not trainable", why),
    ("not yet", why) or ("generic", None)."""
    for family in FAMILIES:
        if name in family.config_classes:
            return "row", family
    if name in NOT_TRAINABLE:
        return "not trainable", NOT_TRAINABLE[name]
    if name in NOT_YET:
        return "not yet", NOT_YET[name]
    return "generic", None


def family_of(base_model):
    """The Family of a ComfyUI BaseModel, from its model config class: its tested row, else the
    generic family of its class; an error naming what it is for a class that is no such model."""
    name = type(base_model.model_config).__name__
    status, what = class_status(name)
    if status == "row":
        return what
    if status == "not trainable":
        raise EriDiffusionError(
            f"ComfyUI loaded this model as '{name}', {what}: EriDiffusion trains LoRAs of "
            "diffusion models from captioned images and clips, which it is not."
        )
    if status == "not yet":
        raise EriDiffusionError(f"EriDiffusion cannot train ComfyUI's '{name}' yet: {what}.")
    family = generic_family(name, base_model.model_sampling)
    if name not in _told_generic:
        _told_generic.add(name)
        logging.warning(
            "EriDiffusion: ComfyUI's %s has no tested row in EriDiffusion's support table: it trains generically, "
            "every linear layer adaptable, with the model's own sampling (%s), conditioned on the captions alone "
            "(image, control or audio inputs of the model get their empty values). Check the samples.",
            name,
            family.prediction,
        )
    return family


def generic_family(name, model_sampling):
    """The Family of ComfyUI model class `name` that no row names: every linear layer of the diffusion
    model adaptable, noise levels drawn with the model's own sampling (its prediction type and, for
    flow models, its shift)."""
    if isinstance(model_sampling, comfy.model_sampling.ModelSamplingFlux):
        sampling, prediction = FLUX_SHIFT, "rectified flow, resolution-dependent shift"
    elif is_flow(model_sampling):
        shift = float(getattr(model_sampling, "shift", 1.0))
        sampling = flow_shift(shift) if shift != 1.0 else LOGIT_NORMAL
        prediction = f"rectified flow, shift {shift:g}"
    else:
        kind = "v" if isinstance(model_sampling, comfy.model_sampling.V_PREDICTION) else "ε"
        sampling, prediction = UNIFORM, f"{kind} (discrete)"
    reference = "the model's own sampling"
    return Family(f"{name} (generic)", (name,), "all-linear", sampling, reference, prediction=prediction, generic=True)


def family_named(name):
    """The Family whose README name is `name`; a clear error where this ComfyUI lacks it."""
    for family in FAMILIES:
        if family.name == name:
            if not family.host_has():
                raise EriDiffusionError(
                    f"{name} is not supported by this ComfyUI: it has no "
                    f"{'/'.join(family.config_classes)} model class. Update ComfyUI to a "
                    "version that loads it."
                )
            return family
    raise EriDiffusionError(f"unknown model family '{name}'; see the README's support table.")


def resolve_objective(spec, family):
    """`spec` with "auto" timestep sampling replaced by the family's default."""
    if spec.timestep_sampling != "auto":
        return spec
    default = family.sampling
    return replace(
        spec,
        timestep_sampling=default.timestep_sampling,
        logit_mean=default.logit_mean,
        logit_std=default.logit_std,
        sigmoid_scale=default.sigmoid_scale,
        shift=default.shift,
    )


def resolve_targets(targets, family):
    """The adapter targets preset: the family's default for "auto"."""
    return family.targets if targets == "auto" else targets
