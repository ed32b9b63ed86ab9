"""Samples of an audio-video model (LTX-2 with its audio VAE): the nested video + audio latent its
nodes sample (EmptyLTXVLatentVideo's and LTXVEmptyLatentAudio's, LTXVConcatAVLatent), decoded as
VAEDecode and LTXVAudioVAEDecode decode them, written as an mp4 with its sound as ComfyUI's SaveVideo
writes one."""

from fractions import Fraction

from ...formats.atomic_file import write_atomic

AV_FRAME_RATE = 25  # LTX-2's frame rate (LTXVConditioning's and LTXVEmptyLatentAudio's default)


def av_latent(video_latent, audio_vae, frames):
    """The nested (video, audio) zero latent of a clip of `frames` frames at AV_FRAME_RATE."""
    import comfy.nested_tensor
    import comfy_extras.nodes_lt_audio as lt_audio  # ComfyUI's

    audio = lt_audio.LTXVEmptyLatentAudio.execute(frames, AV_FRAME_RATE, 1, audio_vae).args[0]["samples"]
    return comfy.nested_tensor.NestedTensor((video_latent, audio.to(video_latent)))


def decoded_av(vae, audio_vae, samples):
    """(frames (T, H, W, 3), AUDIO) of a sampled nested latent."""
    import comfy_extras.nodes_lt_audio as lt_audio

    video, audio = samples.unbind()
    decoded = vae.decode(video)
    sound = lt_audio.LTXVAudioVAEDecode.execute({"samples": audio}, audio_vae).args[0]
    return decoded.reshape(-1, *decoded.shape[-3:])[..., :3], sound


def save_av_sample(frames, sound, path):
    """Write `frames` with their `sound` as an mp4 (H.264, AAC) as the host's SaveVideo writes it."""
    from comfy_api.latest import InputImpl, Types

    video = InputImpl.VideoFromComponents(
        Types.VideoComponents(
            images=frames.float().clamp(0, 1).cpu(),
            audio={"waveform": sound["waveform"].float().cpu(), "sample_rate": sound["sample_rate"]},
            frame_rate=Fraction(AV_FRAME_RATE),
        )
    )
    mp4 = Types.VideoContainer.MP4
    return write_atomic(path, lambda tmp: video.save_to(tmp, format=mp4, codec=Types.VideoCodec.H264), overwrite=True)


def with_frame_rate(conditioning):
    """`conditioning` with LTX-2's frame rate set, as LTXVConditioning sets it."""
    import node_helpers  # ComfyUI's

    return node_helpers.conditioning_set_values(conditioning, {"frame_rate": float(AV_FRAME_RATE)})
