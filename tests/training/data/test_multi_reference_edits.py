"""Multi-reference edit training: each target with up to three references (control/, control_2/,
control_3/), fed the way the host's nodes feed them: Qwen-Image-Edit reads them through its
vision-language encoder (TextEncodeQwenImageEditPlus) and as reference latents, Flux.2 as
reference latents (chained ReferenceLatent nodes). Tiny stacks of ComfyUI's own classes learn a
three- (Qwen-Image-Edit) or two-reference (Flux.2) edit of the real photos."""

import os

import pytest
import torch

from devkit.edit_pairs import make_edit_pairs
from devkit.stock_comfyui import denoised, load_with_stock_comfyui, relative_error
from devkit.tiny_models import TINY_FAMILIES, build_tiny, family_params
from eridiffusion.errors import EriDiffusionError
from eridiffusion.training.adapters import AdapterSpec
from eridiffusion.training.data.dataset import load_dataset
from eridiffusion.training.data.training_data import build_training_data
from eridiffusion.training.run.config import TrainConfig
from eridiffusion.training.run.trainer import train_lora

TRAIN, HELD_BACK = ("00", "01", "02", "03"), ("04",)
STACKS = {"qwen_image_edit": 3, "flux2": 2}  # tiny stack: references per target
STEPS = 200  # at 6e-3: enough for the tiny models to read the references (400 at 3e-3 before 2026-11-29)
_RUNS = {}


def _train(name, datasets_dir, root):
    references = STACKS[name]
    photos = os.path.join(datasets_dir, "dreambooth_dog")
    folder = make_edit_pairs(photos, str(root / "pairs"), TRAIN, references)
    held = make_edit_pairs(photos, str(root / "held"), HELD_BACK, references)
    model, clip, vae = build_tiny(name, seed=0)
    resolution = TINY_FAMILIES[name].resolution
    with torch.inference_mode():
        data = build_training_data(load_dataset(folder), vae, clip, resolution, str(root / "cache"))
        held_data = build_training_data(load_dataset(held), vae, clip, resolution, str(root / "cache"))
    base = {k: _denoised(model, s) for k, s in enumerate(held_data.samples)}
    config = TrainConfig(
        gradient_checkpointing=False,
        steps=STEPS,
        learning_rate=6e-3,
        dtype="fp32",
        seed=0,
        log_every=20,
        adapter=AdapterSpec(rank=8, alpha=8.0, targets="all-linear"),
        run_name=f"edit_{name}",
    )
    with torch.inference_mode(False):
        result = train_lora(model, data, config, str(root / "run"))
    return {
        "model": model,
        "clip": clip,
        "vae": vae,
        "data": data,
        "held": held_data,
        "base_held": base,
        "result": result,
        "folder": folder,
        "name": name,
    }


@pytest.fixture(params=family_params(sorted(STACKS)))
def edit_run(request, datasets_dir, tmp_path_factory):
    if request.param not in _RUNS:
        _RUNS[request.param] = _train(request.param, datasets_dir, tmp_path_factory.mktemp(request.param))
    return _RUNS[request.param]


@pytest.fixture(scope="module", autouse=True)
def _release_runs():
    yield
    _RUNS.clear()


def _denoised(patcher, sample, references=None, sigma=0.7):
    """The model's clean-latent estimate of `sample` given its (or `references`') reference latents."""
    return denoised(
        patcher, sample, references=sample.reference_latents if references is None else references, sigma=sigma
    )


def _distance_to_target(patcher, sample, denoised):
    target = patcher.model.process_latent_in(sample.latent[None])
    return float((denoised - target).norm() / target.norm())


def test_every_target_gets_its_references_in_folder_order(edit_run):
    record = load_dataset(edit_run["folder"]).records[0]
    folders = [os.path.basename(os.path.dirname(p)) for p in record.references]
    assert folders == ["control", "control_2", "control_3"][: STACKS[edit_run["name"]]]
    assert [len(s.reference_latents) for s in edit_run["data"].samples] == [STACKS[edit_run["name"]]] * len(TRAIN)


def test_evaluation_loss_drops_at_least_30_percent(edit_run):
    result = edit_run["result"]
    assert result.eval_loss_after < 0.7 * result.eval_loss_before, (result.eval_loss_before, result.eval_loss_after)


def test_the_trained_output_changes_with_the_references(edit_run):
    """From mostly noise (σ 0.95), the trained model's estimate of each target changes when it is
    shown another pair's references instead of its own: on average by over 0.5%."""
    samples, patcher = edit_run["data"].samples, edit_run["result"].patcher
    changes = []
    for k, sample in enumerate(samples):
        other_refs = samples[(k + 1) % len(samples)].reference_latents
        own, other = _denoised(patcher, sample, sigma=0.95), _denoised(patcher, sample, other_refs, sigma=0.95)
        changes.append(float((own - other).norm() / own.norm()))
    assert sum(changes) / len(changes) > 5e-3, changes


def test_on_held_back_pairs_the_trained_output_is_closer_to_the_target_than_the_base_output(edit_run):
    patcher = edit_run["result"].patcher
    for k, sample in enumerate(edit_run["held"].samples):
        trained = _distance_to_target(patcher, sample, _denoised(patcher, sample))
        base = _distance_to_target(patcher, sample, edit_run["base_held"][k])
        assert trained < 0.8 * base, (trained, base)


def _host_edit_conditioning(name, clip, vae, folder, stem):
    """The conditioning ComfyUI's own edit nodes make of the pair's instruction and references:
    TextEncodeQwenImageEditPlus(image1..3, vae) for Qwen-Image-Edit; CLIPTextEncode and a
    ReferenceLatent per VAEEncode'd reference for Flux.2."""
    import nodes
    from comfy_extras.nodes_edit_model import ReferenceLatent
    from comfy_extras.nodes_qwen import TextEncodeQwenImageEditPlus

    from eridiffusion.training.samples.inputs import image_tensor

    record = next(r for r in load_dataset(folder).records if os.path.basename(r.path).startswith(stem))
    images = [image_tensor(path, (128, 128)) for path in record.references]
    with torch.inference_mode():
        if name == "qwen_image_edit":
            return TextEncodeQwenImageEditPlus.execute(clip, record.caption, vae, *images).result[0]
        conditioning = nodes.CLIPTextEncode().encode(clip, record.caption)[0]
        for image in images:
            latent = nodes.VAEEncode().encode(vae, image)[0]
            conditioning = ReferenceLatent.execute(conditioning, latent).result[0]
        return conditioning


def test_stock_loraloader_with_the_hosts_edit_nodes_reproduces_the_trained_model(edit_run, tmp_path, caplog):
    path = edit_run["result"].lora.save(str(tmp_path / "edit.safetensors"), dtype="fp32")
    patched, unmatched = load_with_stock_comfyui(edit_run["model"], path, 1.0, caplog)
    assert unmatched == []
    sample = edit_run["data"].samples[0]
    conditioning = _host_edit_conditioning(
        edit_run["name"], edit_run["clip"], edit_run["vae"], edit_run["folder"], "00"
    )
    stock = denoised(patched, sample, conditioning)
    trainer = denoised(edit_run["result"].patcher, sample, conditioning)
    assert relative_error(stock, trainer) < 1e-4
    assert relative_error(trainer, denoised(edit_run["model"], sample, conditioning)) > 1e-2


# --- the data ---------------------------------------------------------------------------------


def test_a_later_reference_folder_without_the_earlier_one_is_an_error_naming_it(datasets_dir, tmp_path):
    folder = make_edit_pairs(os.path.join(datasets_dir, "dreambooth_dog"), str(tmp_path / "pairs"), ("00",), 3)
    os.rename(os.path.join(folder, "control_2"), os.path.join(folder, "skipped"))
    with pytest.raises(EriDiffusionError, match=r"control_3 holds later references, but .* has no control_2/ folder"):
        load_dataset(folder)


def test_a_target_missing_its_second_reference_is_an_error_naming_the_file(datasets_dir, tmp_path):
    folder = make_edit_pairs(os.path.join(datasets_dir, "dreambooth_dog"), str(tmp_path / "pairs"), ("00", "01"), 2)
    os.remove(os.path.join(folder, "control_2", "01.png"))
    with pytest.raises(EriDiffusionError, match=r"01\.jpg has no reference image: .*control_2 as 01\.png"):
        load_dataset(folder)


def test_qwen_image_edit_captions_are_encoded_shown_their_references(datasets_dir, tmp_path):
    folder = make_edit_pairs(os.path.join(datasets_dir, "dreambooth_dog"), str(tmp_path / "pairs"), ("00", "01"), 1)
    _, clip, vae = build_tiny("qwen_image_edit", seed=0)
    with torch.inference_mode():
        data = build_training_data(load_dataset(folder), vae, clip, 64, str(tmp_path / "cache"))
        plain = clip.encode_from_tokens_scheduled(clip.tokenize("colorize the photo of sks dog"))
    first, second = (s.conditionings[0][0][0] for s in data.samples)
    assert all(s.picture_prompt for s in data.samples)
    assert first.shape[1] > plain[0][0].shape[1]  # the picture's tokens joined the instruction's
    assert first.shape == second.shape and not torch.equal(first, second)  # each shown its own reference


def test_a_control_less_edit_encodes_captions_as_instructions_and_trains(dog_dataset, tmp_path):
    model, clip, vae = build_tiny("qwen_image_edit", seed=0)
    with torch.inference_mode():
        data = build_training_data(dog_dataset, vae, clip, 64, str(tmp_path / "cache"), edit_instructions=True)
        plain = build_training_data(dog_dataset, vae, clip, 64, str(tmp_path / "cache"))
    assert data.samples[0].picture_prompt and not plain.samples[0].picture_prompt
    # the edit template's system prompt shapes the encoding (ComfyUI cuts the template itself off)
    assert not torch.equal(data.samples[0].conditionings[0][0][0], plain.samples[0].conditionings[0][0][0])
    config = TrainConfig(steps=4, learning_rate=1e-3, dtype="fp32", gradient_checkpointing=False, run_name="edit_text")
    with torch.inference_mode(False):
        result = train_lora(model, data, config, str(tmp_path / "run"))
    assert len(result.losses) == 4 and all(torch.isfinite(torch.tensor(result.losses)))


def test_edit_instructions_with_a_clip_that_reads_no_pictures_is_an_error(dog_dataset, tmp_path):
    _, clip, vae = build_tiny("sd15", seed=0)
    with pytest.raises(EriDiffusionError, match=r"edit_instructions .* not Qwen-Image's vision-language encoder"):
        build_training_data(dog_dataset, vae, clip, 64, str(tmp_path / "cache"), edit_instructions=True)


def _metadata_pairs(datasets_dir, folder, columns):
    """Targets 00 and 01 with their references in sources/, named by metadata.jsonl's `columns`."""
    import json
    import shutil

    from PIL import Image, ImageOps

    os.makedirs(os.path.join(folder, "sources"))
    lines = []
    for stem in ("00", "01"):
        photo = os.path.join(datasets_dir, "dreambooth_dog", f"{stem}.jpg")
        shutil.copy(photo, os.path.join(folder, f"{stem}.jpg"))
        entry = {"file_name": f"{stem}.jpg", "text": "colorize the photo of sks dog"}
        for k, column in enumerate(columns):
            with Image.open(photo) as image:
                reference = ImageOps.grayscale(image) if k == 0 else ImageOps.mirror(image)
                reference.convert("RGB").save(os.path.join(folder, "sources", f"{column}_of_{stem}.png"))
            entry[column] = f"sources/{column}_of_{stem}.png"
        lines.append(json.dumps(entry))
    with open(os.path.join(folder, "metadata.jsonl"), "w", encoding="utf-8") as file:
        file.write("\n".join(lines) + "\n")
    return folder


def test_metadata_columns_name_each_targets_references_in_order(datasets_dir, tmp_path):
    folder = _metadata_pairs(datasets_dir, str(tmp_path / "pairs"), ("control", "control_2"))
    records = load_dataset(folder).records
    assert [len(r.references) for r in records] == [2, 2]
    assert [os.path.basename(p) for p in records[1].references] == ["control_of_01.png", "control_2_of_01.png"]


def test_metadata_reference_columns_must_not_skip_one(datasets_dir, tmp_path):
    folder = _metadata_pairs(datasets_dir, str(tmp_path / "pairs"), ("control", "control_3"))
    with pytest.raises(EriDiffusionError, match=r"names control, control_3: reference columns go in order"):
        load_dataset(folder)


def test_a_metadata_reference_that_is_missing_is_an_error_naming_the_line(datasets_dir, tmp_path):
    folder = _metadata_pairs(datasets_dir, str(tmp_path / "pairs"), ("control",))
    os.remove(os.path.join(folder, "sources", "control_of_01.png"))
    with pytest.raises(EriDiffusionError, match=r"metadata\.jsonl line 2: control names sources/control_of_01\.png"):
        load_dataset(folder)


def test_references_in_metadata_and_in_a_control_folder_together_are_refused(datasets_dir, tmp_path):
    folder = _metadata_pairs(datasets_dir, str(tmp_path / "pairs"), ("control",))
    make_edit_pairs(os.path.join(datasets_dir, "dreambooth_dog"), str(tmp_path / "other"), ("00", "01"), 1)
    os.rename(str(tmp_path / "other" / "control"), os.path.join(folder, "control"))
    with pytest.raises(EriDiffusionError, match=r"names references both in metadata\.jsonl and in reference folders"):
        load_dataset(folder)


def test_a_sample_line_with_edit_is_encoded_as_qwen_image_edits_instruction():
    from eridiffusion.training.samples.config import sample_config
    from eridiffusion.training.samples.sampler_settings import SamplerSettings

    _, clip, vae = build_tiny("qwen_image_edit", seed=0)
    settings = SamplerSettings(prompts="make it snow --edit\nmake it snow", width=64, height=64)
    with torch.inference_mode():
        edit, plain = sample_config(clip, vae, settings, "/nowhere").renders()
    assert not torch.equal(edit.positive[0][0], plain.positive[0][0])
    _, clip, vae = build_tiny("sd15", seed=0)
    with pytest.raises(EriDiffusionError, match=r"sets --edit, .* not Qwen-Image's vision-language encoder"):
        sample_config(clip, vae, SamplerSettings(prompts="make it snow --edit", width=64, height=64), "/nowhere")
