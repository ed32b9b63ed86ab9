"""The video rows tested from 2026 and the image-to-video rows (built by devkit/tiny_wan.py, tiny_ltx.py,
tiny_hunyuan_video.py ...), in the support table's order."""

from .family_row import DIT_TARGETS, EPS_V, UNIFORM, WAN22_EXPERT_BOUNDARY, Family, flow_shift

VIDEO_2026_FAMILIES = (
    # Video classes tested from 2026.
    # Wan 2.1 Fun Control trains as Wan 2.1 does (musubi-tuner's Fun Control tasks share its shift), from
    # captions: its 32 control-video latent channels stay the zeros model_base.WAN21 gives without a
    # control video, and without a CLIP-vision output its image cross-attention reads the text.
    Family("Wan 2.1 Fun Control", ("WAN21_FunControl2V",), DIT_TARGETS, flow_shift(3.0), "musubi-tuner"),
    # Wan 2.2 Animate is a Wan 2.1 14B with pose and face inputs; no trainer of its own, so Wan's shift.
    # From captions: no pose latents or face pixels (the model skips both), and its 20 reference-image
    # latent and mask channels stay the zeros model_base.WAN21 gives without a reference image.
    Family("Wan 2.2 Animate", ("WAN22_Animate",), DIT_TARGETS, flow_shift(3.0), "as Wan 2.1 (musubi-tuner)"),
    # Wan 2.2 S2V (speech to video) is a Wan 2.1-style 14B; no trainer of its own, so Wan's shift. From
    # captions: no audio embedding, reference latent, reference motion or control video (the model
    # skips each when absent, as WanSoundImageToVideo leaves them without audio or images).
    Family("Wan 2.2 S2V", ("WAN22_S2V",), DIT_TARGETS, flow_shift(3.0), "as Wan 2.1 (musubi-tuner)"),
    # CogVideoX predicts v on a zero-terminal-SNR DDPM schedule (ComfyUI's V_PREDICTION_DDPM); its
    # trainers draw timesteps uniformly over the 1000 steps.
    Family(
        "CogVideoX text-to-video",
        ("CogVideoX_T2V",),
        DIT_TARGETS,
        UNIFORM,
        "diffusers' CogVideoX LoRA trainer",
        prediction=EPS_V,
    ),
    # Mochi: a rectified-flow model trained at the shift ComfyUI samples it with (its sampling_settings).
    Family("Genmo Mochi", ("GenmoMochi",), DIT_TARGETS, flow_shift(6.0), "ComfyUI's sampling shift for Mochi"),
    # (end of 2026 video)
    # Image-to-video (devkit/tiny_wan.py, tiny_hunyuan_video.py): the first frame conditions the clip (CacheLatents'
    # start_image), encoded as ComfyUI's WanImageToVideo / HunyuanVideo15ImageToVideo encode the start image,
    # at the shifts of the text-to-video rows (musubi-tuner's I2V tasks share them). Without a CLIP-vision
    # output, Wan 2.1 I2V's image cross-attention reads the text.
    Family("Wan 2.1 image-to-video", ("WAN21_I2V",), DIT_TARGETS, flow_shift(3.0), "musubi-tuner"),
    # ComfyUI loads Wan 2.2 I2V A14B as WAN21_T2V (36 input channels, no CLIP-vision embedding): its start
    # image is what tells it from the text-to-video row.
    Family(
        "Wan 2.2 image-to-video 14B",
        ("WAN21_T2V",),
        DIT_TARGETS,
        flow_shift(3.0),
        "musubi-tuner",
        expert_boundary=WAN22_EXPERT_BOUNDARY,
    ),
    # HunyuanVideo 1.5's text- and image-to-video models share one layout (and ComfyUI class).
    Family(
        "HunyuanVideo 1.5 image-to-video",
        ("HunyuanVideo15",),
        DIT_TARGETS,
        flow_shift(7.0),
        "musubi-tuner",
        latent_patch=1,
    ),
)
