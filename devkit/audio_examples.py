"""The example workflows of the models that train on sound: LTX-2 on clips with their audio track (the
LTXAV model's video and audio streams, the audio through its audio VAE) and ACE-Step 1.5 on music, each
loaded and sampled as ComfyUI's own template for it does, in the four groups of
example_graphs.training_graph."""

from devkit.example_graphs import TRAINED_MODEL, Node, training_graph
from devkit.family_examples import FITS, SHOWN, SWAPS, TRAINING, model_note, unet_loaders

# LTX-2's loaders as video_ltx2_t2v.json has them: the checkpoint (MODEL and video VAE), its Gemma 3
# text encoder and its audio VAE, both read beside the checkpoint.
LTX2_LOADED = {"model": (1, 0), "clip": (31, 0), "vae": (1, 2)}
LTX2_AUDIO_VAE = (32, 0)
LTX2_CHECKPOINT = "ltx-2-19b-dev.safetensors"
LTX2_FRAME_RATE = 24  # the template's (its two Frame Rate boxes), and the clips'
SOUND_CLIP = "a video of sks dog running through the snow, wearing a red scarf, its paws crunching in the snow"
SOUND_SAMPLES = "a video of sks dog barking on the beach, waves rolling in"
# video_ltx2_t2v.json's negative prompt
LTX2_NEGATIVE = "blurry, low quality, still frame, frames, watermark, overlay, titles, has blurbox, has subtitles"
SOUND_CLIPS_NOTE = (
    "folder: your clips with their sound (mp4, webm or mov with an audio track) inside ComfyUI's input/ folder, "
    "each with a caption .txt of the same name that says what is seen and heard. DatasetMediaOptions' "
    "frames: the frames of each training clip, taken at fps (LTX-2: 8k+1 at 24 fps); a shorter clip is an "
    "error, a shorter audio track is padded with silence. CacheLatents encodes the frames with the VAE and "
    "the sound with CacheMediaOptions' audio_vae (linked from LTXVAudioVAELoader) once, and reuses them on "
    "the next run."
)
SOUND_TRAIN_NOTE = (
    "LoRATrainer trains LTX-2's video and audio streams together on each clip (TrainingObjective's "
    "video_loss_weight and audio_loss_weight weigh the two). Change steps, learning_rate and rank first. "
    "SampleMediaOptions' audio_vae draws the samples with their sound, saved as mp4 (at 25 fps). "
    "SaveLoRA writes models/loras/eridiffusion/."
)
SOUND_TEST_NOTE = (
    "Draws one clip with its sound with the trained MODEL, as the first pass of ComfyUI's LTX-2 text-to-video "
    "template does (without its distilled LoRA and 2x upscale pass): video and audio latents sampled together, "
    "then decoded apart and joined by CreateVideo. Change the prompt (say what is heard too) to try the LoRA; "
    "the saved file also loads in a stock LoraLoaderModelOnly."
)
LTX2_MODEL_NOTE = (
    "The files ComfyUI's own LTX-2 template loads, the checkpoint in its bf16 file (train on it, not the fp8 "
    "one): {} in models/checkpoints (its MODEL and video VAE, and its audio VAE through LTXVAudioVAELoader), "
    "gemma_3_12B_it_fp4_mixed.safetensors in models/text_encoders (LTXAVTextEncoderLoader). The MODEL is "
    "trained; the text encoder and both VAEs encode the clips and draw the samples.\n{}"
)


def ltx2_test(prompt, sources, audio_vae):
    """The first pass of video_ltx2_t2v.json's graph at 768x512x97 (its EmptyLTXVLatentVideo's size), without
    the distilled LoRA and the upscale pass: the prompt and the template's negative through LTXVConditioning
    (24 fps), an empty video latent and LTXVEmptyLatentAudio's audio one joined by LTXVConcatAVLatent, drawn
    by SamplerCustomAdvanced (RandomNoise, KSamplerSelect euler_ancestral, LTXVScheduler 20 steps, CFGGuider
    4 on the trained MODEL), split again, the video decoded by VAEDecodeTiled and the sound by
    LTXVAudioVAEDecode, joined by CreateVideo at 24 fps and saved."""
    frames = {"frames_number": 97, "frame_rate": LTX2_FRAME_RATE, "batch_size": 1}
    inputs = [
        Node(9, "CLIPTextEncode", {"text": prompt}, {"clip": sources["clip"]}, title="Positive"),
        Node(10, "CLIPTextEncode", {"text": LTX2_NEGATIVE}, {"clip": sources["clip"]}, title="Negative"),
        Node(33, "LTXVConditioning", {"frame_rate": float(LTX2_FRAME_RATE)}, {"positive": (9, 0), "negative": (10, 0)}),
        Node(11, "EmptyLTXVLatentVideo", {"width": 768, "height": 512, "length": 97, "batch_size": 1}),
        Node(34, "LTXVEmptyLatentAudio", frames, {"audio_vae": audio_vae}),
        Node(35, "LTXVConcatAVLatent", {}, {"video_latent": (11, 0), "audio_latent": (34, 0)}),
    ]
    schedule = {"steps": 20, "max_shift": 2.05, "base_shift": 0.95, "stretch": True, "terminal": 0.1}
    guider = {"model": TRAINED_MODEL, "positive": (33, 0), "negative": (33, 1)}
    parts = {"noise": (36, 0), "guider": (39, 0), "sampler": (37, 0), "sigmas": (38, 0), "latent_image": (35, 0)}
    sampler = [
        Node(36, "RandomNoise", {"noise_seed": 10}),
        Node(37, "KSamplerSelect", {"sampler_name": "euler_ancestral"}),
        Node(38, "LTXVScheduler", schedule, {"latent": (35, 0)}),
        Node(39, "CFGGuider", {"cfg": 4.0}, guider),
        Node(12, "SamplerCustomAdvanced", {}, parts),
    ]
    tiles = {"tile_size": 512, "overlap": 64, "temporal_size": 4096, "temporal_overlap": 8}
    outputs = [
        Node(40, "LTXVSeparateAVLatent", {}, {"av_latent": (12, 0)}),
        Node(13, "VAEDecodeTiled", tiles, {"samples": (40, 0), "vae": sources["vae"]}),
        Node(41, "LTXVAudioVAEDecode", {}, {"samples": (40, 1), "audio_vae": audio_vae}),
        Node(42, "CreateVideo", {"fps": float(LTX2_FRAME_RATE)}, {"images": (13, 0), "audio": (41, 0)}),
        Node(14, "SaveVideo", {"filename_prefix": "eridiffusion/sks_dog"}, {"video": (42, 0)}),
    ]
    return [inputs, sampler, outputs]


def ltx2_sound():
    """LTX-2 19B dev with sound (video_ltx2_t2v.json): trained on 49-frame clips at 24 fps with their audio
    at 512, samples with their sound at the template's first pass's 20 steps, cfg 4, euler_ancestral (the
    simple schedule: LTXVScheduler is the Test group's); the Test group as ltx2_test."""
    sampling = {"steps": 20, "cfg": 4.0, "sampler_name": "euler_ancestral", "scheduler": "simple"}
    loaders = [
        Node(1, "CheckpointLoaderSimple", {"ckpt_name": LTX2_CHECKPOINT}),
        Node(
            31,
            "LTXAVTextEncoderLoader",
            {"text_encoder": "gemma_3_12B_it_fp4_mixed.safetensors", "ckpt_name": LTX2_CHECKPOINT},
        ),
        Node(32, "LTXVAudioVAELoader", {"ckpt_name": LTX2_CHECKPOINT}),
    ]
    return training_graph(
        None,
        512,
        SOUND_CLIP,
        SOUND_SAMPLES,
        LTX2_MODEL_NOTE.format(LTX2_CHECKPOINT, SWAPS.format(38)),
        loader=loaders,
        trainer={**TRAINING, "vram_budget_gib": 22.0},
        options=SHOWN,
        sampling={**sampling, "width": 768, "height": 512, "frames": 49, "every": 250},
        sources=LTX2_LOADED,
        audio_vae=LTX2_AUDIO_VAE,
        dataset={"folder": "sks_dog_clips_with_sound", "frames": 49, "fps": float(LTX2_FRAME_RATE)},
        data_note=SOUND_CLIPS_NOTE,
        train_note=SOUND_TRAIN_NOTE,
        test=ltx2_test(SOUND_CLIP, LTX2_LOADED, LTX2_AUDIO_VAE),
        test_note=SOUND_TEST_NOTE,
    )


ACE_LOADED = {"model": (1, 0), "clip": (31, 0), "vae": (32, 0)}
MUSIC_TAGS = "neo-soul, live drums, warm bass, rhodes piano, relaxed groove"
MUSIC_SAMPLES = f"{MUSIC_TAGS}\nlo-fi hip hop, vinyl crackle, mellow piano, slow"
MUSIC_SECONDS = 30.0
MUSIC_NOTE = (
    "folder: your music (flac, wav, mp3, ogg, opus, m4a) inside ComfyUI's input/ folder, as ACE-Step's own "
    "trainer reads it: song.txt the tags (style, instruments, mood), song.lyrics.txt the lyrics (none: "
    'instrumental), song.json {"bpm", "keyscale", "timesignature", "language"}. DatasetMediaOptions\' '
    "seconds: the length trained from each file's start (a shorter one is padded with silence). CacheLatents "
    "encodes the music and its captions once and reuses them on the next run; its resolution is unused."
)
MUSIC_TRAIN_NOTE = (
    "LoRATrainer: change steps, learning_rate and rank first. SampleDuringTraining writes each prompt line "
    "(tags) as SampleMediaOptions' seconds of instrumental music, FLAC, in the run's samples/ folder; its "
    "width and height are unused. SaveLoRA writes models/loras/eridiffusion/."
)
MUSIC_TEST_NOTE = (
    "Makes one song with the trained MODEL as ComfyUI's ACE-Step 1.5 template does (ModelSamplingAuraFlow 3, "
    "8 steps at cfg 1, ConditioningZeroOut as the negative), with TextEncodeAceStepAudio1.5's "
    "generate_audio_codes off, as the LoRA was trained. Change the tags, lyrics, bpm and key to try the LoRA; "
    "the saved file also loads in a stock LoraLoader."
)


def ace_step15_test(sources):
    """The graph of audio_ace_step_1_5_split.json: TextEncodeAceStepAudio1.5 of the tags (instrumental, the
    template's seed-independent settings, generate_audio_codes off), its ConditioningZeroOut the negative,
    EmptyAceStep1.5LatentAudio of MUSIC_SECONDS, the trained MODEL through ModelSamplingAuraFlow 3 into
    KSampler (8 steps, cfg 1, euler / simple), VAEDecodeAudio, SaveAudioMP3."""
    encode = {
        "tags": MUSIC_TAGS,
        "lyrics": "[Instrumental]",
        "seed": 42,
        "bpm": 90,
        "duration": MUSIC_SECONDS,
        "timesignature": "4",
        "language": "en",
        "keyscale": "E minor",
        "generate_audio_codes": False,
    }
    inputs = [
        Node(9, "TextEncodeAceStepAudio1.5", encode, {"clip": sources["clip"]}, title="Positive"),
        Node(10, "ConditioningZeroOut", {}, {"conditioning": (9, 0)}, title="Negative"),
        Node(11, "EmptyAceStep1.5LatentAudio", {"seconds": MUSIC_SECONDS, "batch_size": 1}),
    ]
    settings = {"seed": 42, "steps": 8, "cfg": 1.0, "sampler_name": "euler", "scheduler": "simple"}
    links = {"model": (33, 0), "positive": (9, 0), "negative": (10, 0), "latent_image": (11, 0)}
    outputs = [
        Node(33, "ModelSamplingAuraFlow", {"shift": 3.0}, {"model": TRAINED_MODEL}),
        Node(12, "KSampler", settings, links),
        Node(13, "VAEDecodeAudio", {}, {"samples": (12, 0), "vae": sources["vae"]}),
        Node(14, "SaveAudioMP3", {"filename_prefix": "eridiffusion/music"}, {"audio": (13, 0)}),
    ]
    return [inputs, outputs]


def ace_step15():
    """ACE-Step 1.5 (audio_ace_step_1_5_split.json): the 2B turbo DiT, its two Qwen3 encoders as ace and its
    VAE, trained on MUSIC_SECONDS of each song; samples of instrumental tags at the template's 8 steps, cfg 1,
    euler / simple."""
    sampling = {"steps": 8, "cfg": 1.0, "sampler_name": "euler", "scheduler": "simple"}
    encoders = {"clip_name1": "qwen_0.6b_ace15.safetensors", "clip_name2": "qwen_1.7b_ace15.safetensors", "type": "ace"}
    return training_graph(
        None,
        512,
        MUSIC_TAGS,
        MUSIC_SAMPLES,
        model_note(
            "acestep_v1.5_turbo.safetensors in models/diffusion_models, qwen_0.6b_ace15.safetensors and "
            "qwen_1.7b_ace15.safetensors (type ace) in models/text_encoders, ace_1.5_vae.safetensors in models/vae",
            FITS.format(5),
        ),
        loader=unet_loaders(
            "acestep_v1.5_turbo.safetensors", Node(31, "DualCLIPLoader", encoders), "ace_1.5_vae.safetensors"
        ),
        trainer=TRAINING,
        options=SHOWN,
        sampling={**sampling, "seconds": MUSIC_SECONDS, "every": 250},
        sources=ACE_LOADED,
        dataset={"folder": "my_music", "trigger_word": "", "seconds": MUSIC_SECONDS},
        data_note=MUSIC_NOTE,
        train_note=MUSIC_TRAIN_NOTE,
        test=ace_step15_test(ACE_LOADED),
        test_note=MUSIC_TEST_NOTE,
    )


AUDIO_EXAMPLES = {"ltx2_sound_lora.json": ltx2_sound, "ace_step15_lora.json": ace_step15}
# LTXAV and ACEStep15 came after ComfyUI 0.3.75 (so did its LTXV audio nodes and TextEncodeAceStepAudio1.5):
# both are written and run on 0.28 on.
AUDIO_SINCE = {name: "0.28.0" for name in AUDIO_EXAMPLES}
