"""Audio-video training (LTX-2 with its audio VAE, CacheLatents' audio_vae): each clip's audio track is
encoded beside its frames as LTXVAudioVAEEncode encodes it, the model trains on both streams (each
stream's loss weighted as set), both streams' evaluation losses fall, the saved LoRA loads in stock
ComfyUI and reproduces the trainer's output, and the samples are mp4 files with sound. Tiny LTX-2 stacks
of ComfyUI's own classes; clips made from the real photos with synthesized music."""

import os

import av
import pytest
import torch

from devkit.photo_clips import CLIP_FRAMES, write_dog_clips_with_sound
from devkit.short_runs import family_run, quick_samples
from devkit.stock_comfyui import ProbeInput, load_with_stock_comfyui, relative_error
from devkit.tiny_ltx import tiny_ltx2_audio_vae
from devkit.tiny_models import TINY_FAMILIES, build_tiny, family_params
from eridiffusion.errors import EriDiffusionError
from eridiffusion.training.data.clip_audio import clip_audio, encoded_audio
from eridiffusion.training.data.dataset import load_dataset
from eridiffusion.training.data.training_data import build_training_data
from eridiffusion.training.model.prepared_data import stream_weights
from eridiffusion.training.run.evaluation import evaluation_loss
from eridiffusion.training.run.trainer import train_lora

LTX2 = pytest.mark.parametrize("family", family_params(["ltx2"]))  # (skipped where the host lacks LTXAV)
FPS = 16.0


@pytest.fixture(scope="module")
def clips_with_sound(datasets_dir, tmp_path_factory):
    return write_dog_clips_with_sound(os.path.join(datasets_dir, "dreambooth_dog"), str(tmp_path_factory.mktemp("av")))


@pytest.fixture(scope="module")
def trained(clips_with_sound, tmp_path_factory):
    folder = tmp_path_factory.mktemp("av_run")
    model, clip, vae = build_tiny("ltx2", seed=0)
    audio_vae = tiny_ltx2_audio_vae(seed=0)
    dataset = load_dataset(clips_with_sound, frames=CLIP_FRAMES, fps=FPS)
    with torch.inference_mode():
        data = build_training_data(
            dataset, vae, clip, TINY_FAMILIES["ltx2"].resolution, str(folder / "cache"), audio_vae=audio_vae
        )
        sample = quick_samples(clip, vae, "a photo of sks dog, rock", 96, 64, CLIP_FRAMES, audio_vae=audio_vae)
    config = family_run("av", 100)
    probe = ProbeInput.of(model, data)
    before = probe.output(model)
    with torch.inference_mode(False):
        streams_before = [evaluation_loss(model, data, config, stream=s) for s in (0, 1)]
        result = train_lora(model, data, config, str(folder / "run"), sample_settings=sample)
        streams_after = [evaluation_loss(result.patcher, data, config, stream=s) for s in (0, 1)]
    return {
        "model": model,
        "audio_vae": audio_vae,
        "data": data,
        "dataset": dataset,
        "result": result,
        "probe": probe,
        "before": before,
        "streams": (streams_before, streams_after),
    }


@LTX2
def test_each_clips_audio_track_is_encoded_beside_its_frames_as_ltxv_audio_vae_encode_encodes_it(trained, family):
    sample, record = trained["data"].samples[0], trained["dataset"].records[0]
    expected = encoded_audio(trained["audio_vae"], clip_audio(record.path, trained["dataset"].video))
    assert torch.equal(sample.audio_latent, expected)
    # 9 frames at 16 fps are 0.5625 s: the audio VAE's 25 latents a second, its 16 frequency bins
    assert tuple(sample.audio_latent.shape) == (8, 14, 16)
    assert sample.conditioning_values == {"frame_rate": FPS}


@LTX2
def test_both_streams_evaluation_losses_fall_at_least_30_percent(trained, family):
    (video_before, audio_before), (video_after, audio_after) = trained["streams"]
    assert video_after < 0.7 * video_before, (video_before, video_after)
    assert audio_after < 0.7 * audio_before, (audio_before, audio_after)
    result = trained["result"]
    assert result.eval_loss_after < 0.7 * result.eval_loss_before
    assert result.stream_losses == {"video": [video_before, video_after], "audio": [audio_before, audio_after]}


@LTX2
def test_the_lora_loads_in_stock_comfyui_and_reproduces_the_audio_video_output(trained, family, tmp_path, caplog):
    path = trained["result"].lora.save(str(tmp_path / "lora.safetensors"), dtype="fp32")
    patched, unmatched = load_with_stock_comfyui(trained["model"], path, 1.0, caplog)
    assert unmatched == []
    probe = trained["probe"]
    output = probe.output(trained["result"].patcher)
    assert relative_error(probe.output(patched), output) < 1e-4
    assert relative_error(output, trained["before"]) > 1e-2
    assert torch.equal(probe.output(trained["model"]), trained["before"])  # the input model is untouched


@LTX2
def test_the_saved_sample_is_an_mp4_with_its_sound(trained, family):
    path = trained["result"].sample_paths[-1]
    assert path.endswith(".mp4")
    with av.open(path) as container:
        assert [s.type for s in container.streams] == ["video", "audio"]
        assert sum(f.samples for f in container.decode(audio=0)) > 0.3 * container.streams.audio[0].rate


def test_stream_weights_make_the_mean_loss_the_weighted_sum_of_each_streams_mean():
    shapes = [torch.Size([1, 4, 2, 3]), torch.Size([1, 2, 5])]
    errors = torch.rand(1, 24 + 10)
    weighted = (errors * stream_weights(shapes, (0.5, 2.0))).mean()
    assert torch.allclose(weighted, 0.5 * errors[:, :24].mean() + 2.0 * errors[:, 24:].mean())


@LTX2
def test_an_audio_vae_with_clips_without_sound_is_refused_before_encoding(dog_clips, family, tmp_path):
    _, clip, vae = build_tiny("ltx2", seed=0)
    with torch.inference_mode(), pytest.raises(EriDiffusionError, match="has no audio track"):
        build_training_data(dog_clips, vae, clip, 64, str(tmp_path), audio_vae=tiny_ltx2_audio_vae(seed=0))
    assert not os.path.exists(tmp_path / "latents")


@LTX2
def test_a_video_vae_given_as_the_audio_vae_is_refused(clips_with_sound, family, tmp_path):
    _, clip, vae = build_tiny("ltx2", seed=0)
    with torch.inference_mode(), pytest.raises(EriDiffusionError, match="not the audio VAE"):
        build_training_data(
            load_dataset(clips_with_sound, frames=CLIP_FRAMES, fps=FPS), vae, clip, 64, str(tmp_path), audio_vae=vae
        )


@LTX2
def test_clips_sound_for_a_model_without_an_audio_stream_is_refused_before_training(clips_with_sound, family, tmp_path):
    _, clip, vae = build_tiny("ltx2", seed=0)
    dataset = load_dataset(clips_with_sound, frames=CLIP_FRAMES, fps=FPS)
    with torch.inference_mode():
        data = build_training_data(
            dataset, vae, clip, 64, str(tmp_path / "cache"), audio_vae=tiny_ltx2_audio_vae(seed=0)
        )
    video_only = build_tiny("ltxv", seed=0)[0]  # LTX-Video: the same latent space, no audio stream
    with torch.inference_mode(False), pytest.raises(EriDiffusionError, match="no audio stream") as refused:
        train_lora(video_only, data, family_run("av", 1), str(tmp_path / "run"))
    assert "CacheLatents' audio_vae" in str(refused.value)
    assert not os.path.exists(tmp_path / "run")


@LTX2
def test_samples_with_sound_for_a_model_without_an_audio_stream_are_refused_before_training(
    dog_clips, family, tmp_path
):
    model, clip, vae = build_tiny("wan21_t2v", seed=0)
    with torch.inference_mode():
        data = build_training_data(dog_clips, vae, clip, 64, str(tmp_path / "cache"))
        sample = quick_samples(clip, vae, "a photo of sks dog", 64, 64, 5, audio_vae=tiny_ltx2_audio_vae(seed=0))
    with torch.inference_mode(False), pytest.raises(EriDiffusionError, match="no audio stream") as refused:
        train_lora(model, data, family_run("av", 1), str(tmp_path / "run"), sample_settings=sample)
    assert "SampleDuringTraining's audio_vae" in str(refused.value)
    assert not os.path.exists(tmp_path / "run")
