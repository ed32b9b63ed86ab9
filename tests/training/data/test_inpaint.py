"""Fill / inpaint training (FLUX.1 Fill, ComfyUI's FluxInpaint): with CacheLatents' inpaint, each
image's masks/ region is grayed out, encoded and given to the model with the mask, as
InpaintModelConditioning gives them; a tiny FluxInpaint stack learns to fill the masked region of
the real photos, and the saved LoRA reproduces it in stock ComfyUI with the host's inpaint node."""

import os

import pytest
import torch

from devkit.photo_masks import copy_photos, half_black_masks
from devkit.stock_comfyui import denoised, load_with_stock_comfyui, relative_error
from devkit.tiny_models import TINY_FAMILIES, build_tiny, family_params
from eridiffusion.errors import EriDiffusionError
from eridiffusion.training.adapters import AdapterSpec
from eridiffusion.training.data.dataset import load_dataset
from eridiffusion.training.data.inpaint import fitted_mask
from eridiffusion.training.data.training_data import build_training_data
from eridiffusion.training.model.prepared_data import sample_values
from eridiffusion.training.run.config import TrainConfig
from eridiffusion.training.run.trainer import train_lora
from eridiffusion.training.samples.inputs import image_tensor

NAME = "flux_fill"
PHOTOS = ("00", "01", "02", "03")


def _config(steps, run_name):
    return TrainConfig(
        gradient_checkpointing=False,
        steps=steps,
        learning_rate=3e-3,
        dtype="fp32",
        seed=0,
        log_every=20,
        adapter=AdapterSpec(rank=8, alpha=8.0, targets="all-linear"),
        run_name=run_name,
    )


@pytest.fixture(scope="module", params=family_params([NAME]))
def fill(request, datasets_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("fill")
    folder = copy_photos(datasets_dir, str(root / "photos"), PHOTOS)
    half_black_masks(folder, PHOTOS)
    model, clip, vae = build_tiny(NAME, seed=0)
    with torch.inference_mode():
        data = build_training_data(
            load_dataset(folder), vae, clip, TINY_FAMILIES[NAME].resolution, str(root / "cache"), inpaint=True
        )
    before = _masked_region_loss(model, data)
    with torch.inference_mode(False):
        result = train_lora(model, data, _config(TINY_FAMILIES[NAME].steps, "fill"), str(root / "run"))
    after = _masked_region_loss(result.patcher, data)
    return {
        "model": model,
        "clip": clip,
        "vae": vae,
        "data": data,
        "result": result,
        "folder": folder,
        "masked_loss": (before, after),
    }


def _masked_region_loss(patcher, data, sigmas=(0.2, 0.4, 0.6, 0.8)):
    """Mean squared error of the model's clean-latent estimate inside each image's mask (the region
    it fills), from fixed noise at `sigmas`, with the image's masked image and mask as inputs."""
    total, weight = 0.0, 0.0
    for k, sample in enumerate(data.samples):
        x0 = patcher.model.process_latent_in(sample.latent[None])
        for sigma in sigmas:
            out = _output(patcher, sample, sample_values(sample, {}), sigma=sigma, seed=k)
            mask = sample.mask[None]  # (1, 1, h, w) on the latent grid
            total += float((((out - x0) ** 2) * mask).sum())
            weight += float(mask.sum()) * x0.shape[1]
    return total / weight


def _host_inpaint(fill, index):
    """(positive conditioning, latent) that ComfyUI's InpaintModelConditioning makes of sample
    `index`'s fitted image and mask."""
    import nodes

    sample, record = fill["data"].samples[index], load_dataset(fill["folder"]).records[index]
    pixels = image_tensor(record.path, sample.bucket)
    mask = torch.from_numpy(__import__("numpy").asarray(fitted_mask(record, sample.bucket), dtype="float32") / 255)[
        None
    ]
    with torch.inference_mode():
        positive = nodes.CLIPTextEncode().encode(fill["clip"], record.caption)[0]
        positive, _, latent = nodes.InpaintModelConditioning().encode(
            positive, positive, pixels, fill["vae"], mask, True
        )
    return positive, latent


def test_the_masked_image_and_mask_are_what_inpaint_model_conditioning_makes(fill):
    positive, _ = _host_inpaint(fill, 0)
    latent, mask = fill["data"].samples[0].inpaint
    options = positive[0][1]
    assert torch.allclose(latent[None], options["concat_latent_image"], atol=1e-5)
    assert torch.equal(mask[None].round(), options["concat_mask"].reshape(mask[None].shape).round())


def test_fill_training_lowers_the_masked_regions_evaluation_loss_30_percent(fill):
    before, after = fill["masked_loss"]
    assert after < 0.7 * before, (before, after)
    result = fill["result"]  # (and the whole images')
    assert result.eval_loss_after < 0.7 * result.eval_loss_before, (result.eval_loss_before, result.eval_loss_after)


def _output(patcher, sample, options, sigma=0.8, seed=3):
    return denoised(patcher, sample, options=options, sigma=sigma, seed=seed)


def test_the_trained_model_reads_the_masked_image(fill):
    samples, patcher = fill["data"].samples, fill["result"].patcher
    own = _output(patcher, samples[0], sample_values(samples[0], {}))
    other = _output(patcher, samples[0], sample_values(samples[1], {}))
    assert relative_error(own, other) > 1e-2


def test_stock_loraloader_with_inpaint_model_conditioning_reproduces_the_trained_model(fill, tmp_path, caplog):
    path = fill["result"].lora.save(str(tmp_path / "fill.safetensors"), dtype="fp32")
    patched, unmatched = load_with_stock_comfyui(fill["model"], path, 1.0, caplog)
    assert unmatched == []
    positive, _ = _host_inpaint(fill, 0)
    sample = fill["data"].samples[0]
    host = {k: positive[0][1][k] for k in ("concat_latent_image", "concat_mask")}
    trainer = _output(fill["result"].patcher, sample, host)
    assert relative_error(_output(patched, sample, host), trainer) < 1e-4
    assert relative_error(trainer, _output(fill["model"], sample, host)) > 1e-2


@pytest.mark.parametrize("name", family_params([NAME]))
def test_an_inpainting_model_without_inpaint_data_is_refused_before_training(name, datasets_dir, tmp_path):
    folder = copy_photos(datasets_dir, str(tmp_path / "photos"), ("00",))
    model, clip, vae = build_tiny(name, seed=0)
    with torch.inference_mode():
        data = build_training_data(load_dataset(folder), vae, clip, 64, str(tmp_path / "cache"))
    with pytest.raises(EriDiffusionError, match=r"FluxInpaint, an inpainting model .* turn on CacheLatents' inpaint"):
        train_lora(model, data, _config(1, "refused"), str(tmp_path / "run"))
    assert not os.path.exists(tmp_path / "run")


def test_inpaint_data_for_a_model_without_inpainting_inputs_is_refused(datasets_dir, tmp_path):
    folder = copy_photos(datasets_dir, str(tmp_path / "photos"), ("00",))
    model, clip, vae = build_tiny("sd15", seed=0)
    with torch.inference_mode():
        data = build_training_data(load_dataset(folder), vae, clip, 64, str(tmp_path / "cache"), inpaint=True)
    with pytest.raises(EriDiffusionError, match=r"but SD15 has no inpainting inputs to read them; turn inpaint off"):
        train_lora(model, data, _config(1, "refused"), str(tmp_path / "run"))


def test_a_flux_model_whose_input_layout_comfyui_cannot_fill_is_refused_before_training(dog_dataset, tmp_path):
    """Flex.2 stacks the noise, an inpainting image, its mask and a control image (49 channels), which
    ComfyUI's Flux does not build: an error naming the layout, not a failed forward."""
    from devkit.detected_configs import detected_model_config
    from devkit.tiny_flux import FLUX_DEV_LAYOUT, FLUX_SHRINK, FLUX_WIDTH, flux1_stack

    layout = {**FLUX_DEV_LAYOUT, "img_in.weight": (FLUX_WIDTH, 49 * 2 * 2)}
    model, clip, vae = flux1_stack(detected_model_config(layout, FLUX_SHRINK, "Flux"), 0)
    with torch.inference_mode():
        data = build_training_data(dog_dataset, vae, clip, 64, str(tmp_path / "cache"))
    with pytest.raises(EriDiffusionError, match=r"as Flux with 49 input channels, but its Flux fills 16 .*\(Flex\.2"):
        train_lora(model, data, _config(1, "flex2"), str(tmp_path / "run"))


def test_a_sample_mask_of_another_aspect_than_its_image_is_an_error_naming_both(datasets_dir, tmp_path):
    from PIL import Image

    from eridiffusion.training.samples.config import sample_config
    from eridiffusion.training.samples.sampler_settings import SamplerSettings

    Image.new("L", (40, 10), 255).save(tmp_path / "wide.png")
    image = os.path.join(datasets_dir, "dreambooth_dog", "00.jpg")
    _, clip, vae = build_tiny("sd15", seed=0)
    settings = SamplerSettings(prompts=f"a dog --image {image} --mask {tmp_path / 'wide.png'}", width=64, height=64)
    with pytest.raises(EriDiffusionError, match=r"mask .*wide\.png is 40x10, but its image .*00\.jpg is"):
        sample_config(clip, vae, settings, str(tmp_path))
