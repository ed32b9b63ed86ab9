"""SampleDuringTraining's per-prompt settings probed with new bad lines, as users reach them: the node
when ComfyUI queues the prompt, a config file's `sample.prompts` and ai-toolkit's `samples[]` when the
config is read, and their images before the model loads. A flag set twice, a flag word that is no
flag, an image that is none, or an ai-toolkit value smuggling a flag in is refused by line and key."""

import asyncio
import os
import shutil

import pytest
from PIL import Image

from devkit.headless import write_yaml
from devkit.workflow import training_prompt, with_sampler
from eridiffusion.errors import EriDiffusionError
from eridiffusion.headless.run_config import load_run_config
from eridiffusion.training.samples.sampler_settings import SamplerSettings

LINE = "SampleDuringTraining: prompts line 1"


def refusal(prompts):
    """The message SampleDuringTraining's settings refuse `prompts` with."""
    with pytest.raises(EriDiffusionError) as raised:
        SamplerSettings(prompts=prompts)
    return str(raised.value)


@pytest.mark.parametrize(
    "line, message",
    [
        ("a dog --w 512 --w 768", "sets width twice (--w and --w); keep one of them."),
        ("a dog --n ugly --neg blurry", "sets negative twice (--n and --neg); keep one of them."),
        ("a dog --seed 1 --d 2", "sets seed twice (--seed and --d); keep one of them."),
        ("a dog --edit --edit", "sets edit twice (--edit and --edit); keep one of them."),
    ],
)
def test_a_setting_given_twice_on_a_line_is_refused_naming_both_flags(line, message):
    assert refusal(line) == f"{LINE} {message}"


@pytest.mark.parametrize(
    "line, message",
    [
        ("a dog --w=512", ": --w=512: write the value after a space (--w 512)."),
        ("a dog --ref2 a.png", ": unknown flag --ref2; did you mean ref?"),
        ("a dog --n blurry --cfg_scale 7", ": unknown flag --cfg_scale"),
        ("a dog --n-steps 4", ": unknown flag --n-steps"),
    ],
)
def test_a_flag_word_that_is_no_flag_is_refused_not_read_as_prompt_or_negative_text(line, message):
    assert refusal(line).startswith(f"{LINE}{message}"), refusal(line)


def test_two_dashes_alone_stay_prompt_text_and_the_flags_after_them_are_read():
    (spec,) = SamplerSettings(prompts="before -- after --w 512").prompt_specs(None)
    assert (spec.text, spec.width) == ("before -- after", 512)


@pytest.fixture
def images(tmp_path):
    Image.new("RGB", (64, 64), "gray").save(tmp_path / "photo.png")
    Image.new("L", (32, 80), 255).save(tmp_path / "tall_mask.png")
    (tmp_path / "notes.png").write_text("not an image")
    return tmp_path


def test_a_reference_that_is_no_image_is_refused_when_the_prompts_are_read(images):
    with pytest.raises(EriDiffusionError) as raised:
        SamplerSettings(prompts="edit it --ref photo.png --ref notes.png").prompt_specs(str(images))
    assert str(raised.value).startswith(f"{images / 'notes.png'} cannot be read as an image")


def test_an_inpainting_mask_of_another_aspect_is_refused_when_the_prompts_are_read(images):
    with pytest.raises(EriDiffusionError) as raised:
        SamplerSettings(prompts="fill --image photo.png --mask tall_mask.png").prompt_specs(str(images))
    assert str(raised.value) == (
        f"mask {images / 'tall_mask.png'} is 32x80, but its image {images / 'photo.png'} is 64x64 (as shown, after "
        "its EXIF orientation): export the mask at the image's size."
    )


def _queued_errors(prompt):
    import execution

    valid, _, _, node_errors = asyncio.run(execution.validate_prompt("probe", prompt, None))
    assert not valid
    return [e["details"] for node in node_errors.values() for e in node["errors"]]


@pytest.mark.parametrize(
    "line, message",
    [
        ("a dog --w 64 --w 96", f"{LINE} sets width twice (--w and --w); keep one of them."),
        ("a dog --ref no_such_photo.png", f"{LINE}: --ref: no image file "),
        ("a dog --steps many", f"{LINE}: --steps must be a whole number, got 'many'."),
    ],
)
def test_the_node_refuses_a_bad_prompt_line_when_the_prompt_is_queued_before_any_node_runs(
    line, message, registered, photos
):
    prompt = with_sampler(training_prompt(photos(1), {"run_name": "queued_sample_line"}), prompts=line)
    assert any(detail.startswith(f"prompts - {message}") for detail in _queued_errors(prompt)), _queued_errors(prompt)


def test_the_node_refuses_a_reference_in_the_input_folder_that_is_no_image_when_queued(registered, photos):
    import folder_paths

    path = os.path.join(folder_paths.get_input_directory(), "probe_not_an_image.png")
    with open(path, "w") as f:
        f.write("text")
    try:
        prompt = with_sampler(training_prompt(photos(1), {"run_name": "queued_ref"}), prompts="a --ref " + path)
        assert any(d.startswith(f"prompts - {path} cannot be read as an image") for d in _queued_errors(prompt))
    finally:
        os.remove(path)


def test_a_config_files_bad_sample_flag_is_named_with_the_file_when_the_config_is_read(tmp_path):
    path = write_yaml(
        tmp_path / "run.yaml",
        "model: tiny-sd15\ndataset: {folder: photos}\nsample: {prompts: ['a dog --cfg_scale 7']}\n",
    )
    with pytest.raises(EriDiffusionError) as raised:
        load_run_config(path)
    assert f"{path}" in str(raised.value) and f"sample: {LINE}: unknown flag --cfg_scale" in str(raised.value)


def test_a_config_files_prompt_list_item_holding_a_line_break_is_refused(tmp_path):
    path = write_yaml(
        tmp_path / "run.yaml",
        'model: tiny-sd15\ndataset: {folder: photos}\nsample: {prompts: ["a dog\\n--w 64", "a cat"]}\n',
    )
    with pytest.raises(EriDiffusionError, match=r"sample\.prompts\[0\] holds a line break; a list item is one line"):
        load_run_config(path)


def test_a_missing_sample_reference_is_named_before_the_model_is_looked_at(tmp_path, datasets_dir):
    from eridiffusion.headless.run import load_inputs

    folder = tmp_path / "photos"
    folder.mkdir()
    for ext in (".jpg", ".txt"):
        shutil.copy(os.path.join(datasets_dir, "dreambooth_dog", "00" + ext), folder)
    missing_model = tmp_path / "no_such_model.safetensors"  # never opened: the reference is named first
    path = write_yaml(
        tmp_path / "run.yaml",
        f"model: {{checkpoint: {missing_model}}}\ndataset: {{folder: photos}}\n"
        "sample: {prompts: ['a dog --ref nope.png']}\n",
    )
    with pytest.raises(EriDiffusionError) as raised:
        load_inputs(load_run_config(path))
    named = f"{path}: sample: {LINE}: --ref: no image file {tmp_path / 'nope.png'}; give a path"
    assert str(raised.value).startswith(named)


AI_TOOLKIT = """\
job: extension
config:
  name: probe
  process:
    - type: sd_trainer
      network: {type: lora, linear: 8, linear_alpha: 8}
      datasets: [{folder_path: photos}]
      model: {name_or_path: tiny-sdxl}
      sample:
        sample_every: 10
        samples:
          - prompt: "a dog"
            ITEM
"""


@pytest.mark.parametrize(
    "item, message",
    [
        ('neg: "blurry --seed 3"', r"samples\[0\]\.neg is 'blurry --seed 3', which holds a line break or a --flag"),
        ('ctrl_img: "a.png\\nb.png"', r"samples\[0\]\.ctrl_img is 'a.png\\nb.png', which holds a line break"),
        ("width: 0", r"sample: SampleDuringTraining: prompts line 1: --w must be between 64 and 4096 \(got 0\)"),
        ("seed: -5", r"sample: SampleDuringTraining: prompts line 1: --seed must be between 0 and"),
        ("sample_steps: many", r"prompts line 1: --steps must be a whole number, got 'many'"),
    ],
)
def test_an_ai_toolkit_sample_items_bad_value_is_named_when_the_config_is_read(item, message, tmp_path):
    path = write_yaml(tmp_path / "ai.yaml", AI_TOOLKIT.replace("ITEM", item))
    with pytest.raises(EriDiffusionError, match=message) as raised:
        load_run_config(path)
    assert str(raised.value).startswith(str(path))


def test_an_ai_toolkit_sample_prompt_holding_a_line_break_is_refused(tmp_path):
    path = write_yaml(
        tmp_path / "ai.yaml", AI_TOOLKIT.replace('"a dog"', '"a dog\\nin snow"').replace("ITEM", "seed: 1")
    )
    with pytest.raises(
        EriDiffusionError, match=r"samples\[0\]\.prompt holds a line break; write the prompt on one line"
    ):
        load_run_config(path)


def test_a_sample_guidance_the_model_ignores_is_refused_headless_before_any_image_is_encoded(
    tmp_path, datasets_dir, command_line
):
    from devkit.headless import named_in, refused_train

    path = write_yaml(
        tmp_path / "run.yaml",
        f"model: tiny-sd15\ndataset: {{folder: {datasets_dir}/dreambooth_dog}}\n"
        "sample: {prompts: ['a dog --g 3'], width: 64, height: 64}\n",
    )
    error, left = refused_train(path, tmp_path / "out", cwd=tmp_path, process=command_line)
    assert named_in(path, error) == (
        "SampleDuringTraining: prompt 'a dog' sets --g 3, but BaseModel has no guidance embedding; use --cfg for "
        "classifier-free guidance."
    )
    assert left == []  # no latent cache, no run folder
