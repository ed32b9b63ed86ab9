"""Config files: `_base_` merging, keys and defaults taken from the node definitions, errors that name
the key and its file, ai-toolkit's format, and the shipped examples."""

import glob
import os

import pytest

from devkit.headless import CONFIGS, write_yaml
from eridiffusion.errors import EriDiffusionError
from eridiffusion.headless.run_config import config_yaml, load_run_config
from eridiffusion.headless.schema import NODE_SECTIONS, section_settings


def test_base_files_merge_depth_first_and_the_later_one_wins(tmp_path):
    write_yaml(tmp_path / "root.yaml", "model: tiny-sd15\ndataset: {folder: images}\ntrain: {rank: 4, steps: 10}\n")
    write_yaml(tmp_path / "a.yaml", "_base_: root.yaml\ntrain: {rank: 8, alpha: 2.0}\n")
    write_yaml(tmp_path / "b.yaml", "train: {rank: 12}\n")
    top = write_yaml(tmp_path / "top.yaml", "_base_: [a.yaml, b.yaml]\ntrain: {steps: 30}\n")
    config = load_run_config(top)
    assert (config.train["rank"], config.train["alpha"], config.train["steps"]) == (12, 2.0, 30)
    assert config.model.checkpoint == "tiny-sd15"


def test_relative_paths_are_relative_to_the_file_that_writes_them(tmp_path):
    (tmp_path / "bases").mkdir()
    write_yaml(tmp_path / "bases" / "data.yaml", "dataset: {folder: ../photos}\ncache: {cache_folder: cache}\n")
    top = write_yaml(tmp_path / "top.yaml", "_base_: bases/data.yaml\nmodel: tiny-sdxl\noutput: runs\n")
    config = load_run_config(top)
    assert config.dataset["folder"] == str(tmp_path / "photos")
    assert config.cache["cache_folder"] == str(tmp_path / "bases" / "cache")
    assert config.output == str(tmp_path / "runs")


def test_base_files_that_include_each_other_are_an_error(tmp_path):
    write_yaml(tmp_path / "a.yaml", "_base_: b.yaml\n")
    write_yaml(tmp_path / "b.yaml", "_base_: a.yaml\n")
    with pytest.raises(EriDiffusionError, match=r"in a circle: a.yaml -> b.yaml -> a.yaml"):
        load_run_config(tmp_path / "a.yaml")


def test_unknown_key_is_an_error_naming_the_key_its_file_and_the_nearest_known_key(tmp_path):
    write_yaml(tmp_path / "base.yaml", "model: tiny-sdxl\ntrain: {learnig_rate: 0.001}\n")
    top = write_yaml(tmp_path / "top.yaml", "_base_: base.yaml\ndataset: {folder: x}\n")
    with pytest.raises(EriDiffusionError) as error:
        load_run_config(top)
    assert str(error.value).startswith(
        f"{tmp_path / 'base.yaml'}: unknown key train.learnig_rate; did you mean learning_rate?"
    )


def test_unknown_section_is_an_error_naming_the_nearest_section(tmp_path):
    top = write_yaml(tmp_path / "top.yaml", "model: tiny-sdxl\ndataset: {folder: x}\ntrian: {steps: 3}\n")
    with pytest.raises(EriDiffusionError, match=r"unknown section 'trian'; did you mean train\?"):
        load_run_config(top)


def test_values_outside_the_node_inputs_bounds_are_an_error_naming_the_key(tmp_path):
    top = write_yaml(tmp_path / "top.yaml", "model: tiny-sdxl\ndataset: {folder: x}\ntrain: {rank: 0}\n")
    with pytest.raises(EriDiffusionError, match=r"top.yaml: train.rank must be between 1 and 1024 \(got 0\)"):
        load_run_config(top)
    top = write_yaml(tmp_path / "top.yaml", "model: tiny-sdxl\ndataset: {folder: x}\ntrain: {optimizer: adamw}\n")
    with pytest.raises(
        EriDiffusionError,
        match=r"train.optimizer 'adamw' unknown; choose one of AdamW, .*; did you mean "
        r"AdamW\?",
    ):
        load_run_config(top)
    # a layer pattern that is no regular expression, wherever it is written (the adapter's section)
    top = write_yaml(tmp_path / "top.yaml", "model: tiny-sdxl\ndataset: {folder: x}\ntrain: {exclude: 'ff.net['}\n")
    with pytest.raises(EriDiffusionError, match=r"top.yaml: train.exclude 'ff.net\[' is not a regular expression"):
        load_run_config(top)


def test_every_node_input_is_a_key_of_its_section_with_the_nodes_default(tmp_path):
    config = load_run_config(
        write_yaml(
            tmp_path / "top.yaml",
            "model: tiny-sdxl\ndataset: {folder: x}\nobjective: {}\nsample: {}\n"
            "validation_dataset: {folder: v}\nregularization_dataset: {folder: r}\n",
        )
    )
    for section, nodes in section_nodes().items():  # each section holds its node(s) widgets, same defaults
        widgets = {
            name: spec[1].get("default")
            for node in nodes
            for group in ("required", "optional")
            for name, spec in node.INPUT_TYPES().get(group, {}).items()
            if isinstance(spec[0], list) or spec[0] in ("INT", "FLOAT", "STRING", "BOOLEAN", "COMBO")
        }
        values = getattr(config, section)
        assert set(values) == set(widgets), section
        assert {k: v for k, v in values.items() if k != "folder"} == {
            k: v for k, v in widgets.items() if k != "folder"
        }, section


def section_nodes():
    """{section: the node classes whose inputs it holds}."""
    from eridiffusion.nodes.cache_node import CacheLatents
    from eridiffusion.nodes.dataset_node import LoadDataset
    from eridiffusion.nodes.media_options import CacheMediaOptions, DatasetMediaOptions, SampleMediaOptions
    from eridiffusion.nodes.objective_node import TrainingObjective
    from eridiffusion.nodes.options_nodes import OPTIONS_NODES
    from eridiffusion.nodes.sampling_node import SampleDuringTraining
    from eridiffusion.nodes.save_node import SaveLoRA
    from eridiffusion.nodes.trainer_node import LoRATrainer

    datasets = (LoadDataset, DatasetMediaOptions)
    return {
        "dataset": datasets,
        "cache": (CacheLatents, CacheMediaOptions),
        "train": (LoRATrainer, *OPTIONS_NODES),
        "objective": (TrainingObjective,),
        "sample": (SampleDuringTraining, SampleMediaOptions),
        "save": (SaveLoRA,),
        "validation_dataset": datasets,
        "regularization_dataset": datasets,
    }


def test_a_config_without_sample_or_objective_connects_neither_node(tmp_path):
    config = load_run_config(
        write_yaml(tmp_path / "top.yaml", "model: tiny-sdxl\ndataset: {folder: x}\nsample: null\n")
    )
    assert (config.sample, config.objective) == (None, None)


def test_printed_config_reads_back_as_the_same_config(tmp_path):
    config = load_run_config(os.path.join(CONFIGS, "tiny_demo.yaml"))
    again = load_run_config(write_yaml(tmp_path / "printed.yaml", config_yaml(config)))
    assert again.as_dict() == config.as_dict()
    assert config.sample["prompts"] == "a photo of sks dog\na photo of sks dog on the beach"


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(CONFIGS, "*.yaml"))), ids=os.path.basename)
def test_shipped_config_is_complete_and_valid(path):
    config = load_run_config(path)
    assert config.dataset["folder"] and config.model.describe()
    assert set(config.as_dict()) >= {"model", *NODE_SECTIONS, "logging"}


AI_TOOLKIT = """
job: extension
config:
  name: "my_first_flux_lora_v1"
  process:
    - type: 'sd_trainer'
      training_folder: "output"
      device: cuda:0
      trigger_word: "p3r5on"
      network: {type: "lora", linear: 16, linear_alpha: 16}
      save: {dtype: float16, save_every: 250, max_step_saves_to_keep: 4, push_to_hub: false}
      datasets:
        - folder_path: "/path/to/images/folder"
          caption_ext: "txt"
          caption_dropout_rate: 0.05
          shuffle_tokens: false
          cache_latents_to_disk: true
          resolution: [ 512, 768, 1024 ]
      train:
        batch_size: 1
        steps: 2000
        gradient_accumulation_steps: 1
        train_unet: true
        train_text_encoder: false
        gradient_checkpointing: true
        noise_scheduler: "flowmatch"
        optimizer: "adamw8bit"
        lr: 1e-4
        linear_timesteps: true
        ema_config: {use_ema: true, ema_decay: 0.99}
        dtype: bf16
      model:
        name_or_path: "/models/flux1-dev.safetensors"
        is_flux: true
        quantize: true
      sample:
        sampler: "flowmatch"
        sample_every: 250
        width: 1024
        height: 1024
        prompts:
          - "[trigger] holding a sign that says 'I LOVE PROMPTS!'"
          - "a bear building a log cabin in the snow covered mountains"
        neg: ""
        seed: 42
        walk_seed: true
        guidance_scale: 4
        sample_steps: 20
meta:
  name: "[name]"
  version: '1.0'
"""


def test_ai_toolkit_config_becomes_the_node_inputs_it_means(tmp_path):
    config = load_run_config(write_yaml(tmp_path / "flux.yaml", AI_TOOLKIT))
    assert config.schema == "ai-toolkit"
    assert config.model.checkpoint == "/models/flux1-dev.safetensors"
    assert (config.model.arch, config.model.weight_dtype) == ("flux", "fp8_e4m3fn")
    assert {
        k: config.train[k]
        for k in (
            "run_name",
            "algorithm",
            "rank",
            "alpha",
            "steps",
            "grad_accum",
            "optimizer",
            "learning_rate",
            "dtype",
            "gradient_checkpointing",
            "save_every",
            "keep_last",
            "text_encoder_lr",
            "ema_decay",
        )
    } == {
        "run_name": "my_first_flux_lora_v1",
        "algorithm": "lora",
        "rank": 16,
        "alpha": 16.0,
        "steps": 2000,
        "grad_accum": 1,
        "optimizer": "AdamW8bit",
        "learning_rate": 1e-4,
        "dtype": "bf16",
        "gradient_checkpointing": True,
        "save_every": 250,
        "keep_last": 4,
        "text_encoder_lr": 0.0,
        "ema_decay": 0.99,
    }
    assert {k: config.dataset[k] for k in ("folder", "caption_ext", "caption_dropout", "trigger_word")} == {
        "folder": "/path/to/images/folder",
        "caption_ext": ".txt",
        "caption_dropout": 0.05,
        "trigger_word": "p3r5on",
    }
    assert (config.cache["resolution"], config.cache["extra_resolutions"]) == (1024, "512, 768")  # every size trains
    assert config.save == {"filename_prefix": "my_first_flux_lora_v1", "dtype": "fp16", "overwrite": False}
    assert {k: config.sample[k] for k in ("every", "seed", "cfg", "steps", "width")} == {
        "every": 250,
        "seed": 42,
        "cfg": 1.0,
        "steps": 20,
        "width": 1024,
    }  # Flux dev: no CFG
    # Flux dev: ai-toolkit's guidance_scale is each prompt's embedded guidance
    assert config.sample["prompts"].splitlines()[0] == "p3r5on holding a sign that says 'I LOVE PROMPTS!' --g 4"
    assert config.output == str(tmp_path / "output")


def test_ai_toolkit_keys_read_but_not_supported_are_all_listed(tmp_path):
    config = load_run_config(write_yaml(tmp_path / "flux.yaml", AI_TOOLKIT))
    listed = [entry.split(" (")[0] for entry in config.unsupported]
    assert listed == [
        "meta",
        "config.process[0].device",
        "config.process[0].train.linear_timesteps",
        "config.process[0].train.noise_scheduler",
        "config.process[0].sample.sampler",
    ]


def test_ai_toolkit_text_encoder_keys_train_the_encoders_alone_or_beside_the_diffusion_model(tmp_path):
    # ai-toolkit: train_text_encoder at text_encoder_lr (else lr); train_unet false leaves the diffusion model alone
    text = AI_TOOLKIT.replace("train_text_encoder: false", "train_text_encoder: true\n        text_encoder_lr: 3e-5")
    beside = load_run_config(write_yaml(tmp_path / "beside.yaml", text))
    assert (beside.train["text_encoder_lr"], beside.train.get("train_diffusion_model", True)) == (3e-5, True)
    alone = load_run_config(write_yaml(tmp_path / "alone.yaml", text.replace("train_unet: true", "train_unet: false")))
    assert (alone.train["text_encoder_lr"], alone.train["train_diffusion_model"]) == (3e-5, False)
    assert not [entry for entry in alone.unsupported if "train_unet" in entry or "text_encoder" in entry]


AI_TOOLKIT_SAMPLES = """
job: extension
config:
  name: edits
  process:
    - type: sd_trainer
      trigger_word: sks
      network: {type: lora, linear: 8, linear_alpha: 8}
      datasets: [{folder_path: photos}]
      model: {name_or_path: tiny-sdxl}
      sample:
        sample_every: 10
        width: 512
        height: 512
        neg: "lowres"
        seed: 3
        walk_seed: false
        guidance_scale: 5
        samples:
          - prompt: "[trigger] in snow"
            width: 768
            height: 512
            seed: 9
            neg: "blurry"
            sample_steps: 12
            ctrl_img: refs/a.png
          - prompt: "a plain dog --n its own"
            guidance_scale: 2
            ctrl_img_1: refs/a.png
            ctrl_img_2: refs/b.png
"""


def test_ai_toolkit_samples_become_prompt_lines_with_their_own_settings(tmp_path):
    config = load_run_config(write_yaml(tmp_path / "samples.yaml", AI_TOOLKIT_SAMPLES))
    assert config.sample["prompts"].splitlines() == [
        "sks in snow --w 768 --h 512 --n blurry --seed 9 --steps 12 --ref refs/a.png",
        "a plain dog --n its own --seed 3 --ref refs/a.png --ref refs/b.png --cfg 2",  # its --n kept
    ]
    assert (config.sample["cfg"], config.sample["width"]) == (5.0, 512)
    assert not [entry for entry in config.unsupported if ".sample" in entry]


def test_ai_toolkit_sample_items_with_an_unknown_key_are_an_error_naming_it(tmp_path):
    path = write_yaml(tmp_path / "bad.yaml", AI_TOOLKIT_SAMPLES.replace("sample_steps: 12", "sample_stepz: 12"))
    with pytest.raises(EriDiffusionError, match=r"unknown key config.process\[0\].sample.samples\[0\].sample_stepz"):
        load_run_config(path)


def test_ai_toolkit_unknown_key_is_an_error_naming_the_nearest_key(tmp_path):
    path = write_yaml(tmp_path / "bad.yaml", AI_TOOLKIT.replace("sample_steps: 20", "sample_stepz: 20"))
    with pytest.raises(
        EriDiffusionError,
        match=r"unknown key config.process\[0\].sample.sample_stepz; did you mean "
        r"sample_steps\?",
    ):
        load_run_config(path)


def test_ai_toolkit_hugging_face_model_names_are_an_error_with_the_fix(tmp_path):
    path = write_yaml(
        tmp_path / "hf.yaml", AI_TOOLKIT.replace("/models/flux1-dev.safetensors", "black-forest-labs/FLUX.1-dev")
    )
    with pytest.raises(
        EriDiffusionError,
        match=r"name_or_path is 'black-forest-labs/FLUX.1-dev'; EriDiffusion loads "
        r"ComfyUI's single-file checkpoints",
    ):
        load_run_config(path)


def test_model_section_takes_unetloaders_weight_dtypes_and_comfyuis_clip_types():
    import comfy.sd
    import nodes

    from eridiffusion.headless.models import WEIGHT_DTYPE_OPTIONS

    settings = section_settings("model")
    assert settings["weight_dtype"].info.options() == tuple(
        nodes.UNETLoader.INPUT_TYPES()["required"]["weight_dtype"][0]
    )
    assert set(settings["weight_dtype"].info.options()) == set(WEIGHT_DTYPE_OPTIONS)
    assert "flux" in settings["clip_type"].info.options() and len(settings["clip_type"].info.options()) == len(
        comfy.sd.CLIPType
    )


def test_ai_toolkit_output_preservation_and_flip_become_their_settings(tmp_path):
    text = AI_TOOLKIT.replace(
        "        dtype: bf16\n",
        "        dtype: bf16\n        diff_output_preservation: true\n"
        "        min_denoising_steps: 200\n        max_denoising_steps: 900\n"
        "        diff_output_preservation_class: person\n        diff_output_preservation_multiplier: 0.5\n",
    ).replace("          shuffle_tokens: false\n", "          shuffle_tokens: false\n          flip_x: true\n")
    config = load_run_config(write_yaml(tmp_path / "dop.yaml", text))
    assert (config.train["preservation_prompt"], config.train["preservation_weight"]) == ("person", 0.5)
    assert config.dataset["flip"] is True
    assert (config.objective["timestep_min"], config.objective["timestep_max"]) == (0.2, 0.9)
    assert not [entry for entry in config.unsupported if "preservation" in entry or "flip" in entry]


@pytest.mark.parametrize("loss_type, ours", [("mse", "mse"), ("mae", "l1"), ("huber", "huber"), ("wavelet", None)])
def test_ai_toolkit_loss_type_becomes_the_loss_or_is_listed_unsupported(loss_type, ours, tmp_path):
    text = AI_TOOLKIT.replace("        dtype: bf16\n", f"        dtype: bf16\n        loss_type: {loss_type}\n")
    config = load_run_config(write_yaml(tmp_path / "loss.yaml", text))
    listed = [entry for entry in config.unsupported if "loss_type" in entry]
    if ours is None:
        assert (config.objective or {}).get("loss") is None and "mse is used" in listed[0]
    else:
        assert config.objective["loss"] == ours and listed == []


def test_validation_and_regularization_sections_are_second_datasets_for_cache_latents(tmp_path):
    from devkit.paths import shared_datasets
    from eridiffusion.headless.run import cache_latents, load_inputs

    datasets = shared_datasets()
    path = write_yaml(
        tmp_path / "second_datasets.yaml",
        f"""
model: tiny-sd15
dataset: {{folder: {datasets}/dreambooth_dog, validation: 0.2}}
cache: {{resolution: 64, cache_folder: cache}}
validation_dataset: {{folder: {datasets}/dreambooth_backpack}}
regularization_dataset: {{folder: ../{os.path.relpath(os.path.join(datasets, "dreambooth_cat"), tmp_path.parent)}}}
""",
    )
    config = load_run_config(path)
    assert config.regularization_dataset["folder"] == os.path.join(datasets, "dreambooth_cat")
    assert config.validation_dataset["missing_caption"] == "error"  # LoadDataset's defaults filled in
    data = cache_latents(config, load_inputs(config))
    assert (len(data.samples), len(data.validation.samples), len(data.regularization.samples)) == (4, 1 + 6, 5)
    with pytest.raises(EriDiffusionError, match="regularization_dataset.folder is missing"):
        load_run_config(write_yaml(tmp_path / "bad.yaml", "dataset: {folder: x}\nregularization_dataset: {}\n"))


def test_ai_toolkit_is_reg_dataset_becomes_the_regularization_dataset(tmp_path):
    text = AI_TOOLKIT.replace(
        "          resolution: [ 512, 768, 1024 ]\n",
        "          resolution: [ 512, 768, 1024 ]\n"
        "        - folder_path: /path/to/class/images\n          is_reg: true\n",
    )
    config = load_run_config(write_yaml(tmp_path / "reg.yaml", text))
    assert config.regularization_dataset["folder"] == "/path/to/class/images"
    assert config.dataset["folder"] == "/path/to/images/folder"
    twice = text.replace("is_reg: true", "is_reg: false")
    with pytest.raises(EriDiffusionError, match="at most one more with is_reg: true"):
        load_run_config(write_yaml(tmp_path / "two.yaml", twice))


@pytest.mark.parametrize("name", ["null", '""', "[a, b]", "12"])
def test_ai_toolkit_name_that_is_no_text_is_an_error_naming_it(name, tmp_path):
    path = write_yaml(tmp_path / "named.yaml", AI_TOOLKIT.replace('name: "my_first_flux_lora_v1"', f"name: {name}"))
    with pytest.raises(EriDiffusionError, match=r"named\.yaml.*config\.name is .*give the run's name"):
        load_run_config(path)


def test_an_empty_sample_prompt_list_is_named_with_the_config_file_when_the_config_is_read(tmp_path):
    path = write_yaml(tmp_path / "run.yaml", "model: tiny-sdxl\ndataset: {folder: photos}\nsample: {prompts: []}\n")
    with pytest.raises(EriDiffusionError, match=r"run\.yaml.*sample.*prompts is empty; write one prompt per line"):
        load_run_config(path)


def test_a_yaml_syntax_error_is_one_line_with_its_line_and_column(tmp_path):
    path = write_yaml(tmp_path / "tabs.yaml", "model: tiny-sdxl\ntrain:\n\tsteps: 3\n")
    with pytest.raises(EriDiffusionError) as raised:
        load_run_config(path)
    assert str(raised.value) == (
        f"{path}:3:1: is not valid YAML: found character '\\t' that cannot start any token; indent with spaces, "
        "not tabs"
    )


def test_a_device_given_as_a_config_file_is_not_read(tmp_path):
    path = write_yaml(tmp_path / "run.yaml", "_base_: /dev/zero\nmodel: tiny-sdxl\n")
    with pytest.raises(EriDiffusionError, match=r"config file /dev/zero \(named in .*run\.yaml's _base_\) is not a "):
        load_run_config(path)
    with pytest.raises(EriDiffusionError, match=r"config file /dev/zero is not a regular file"):
        load_run_config("/dev/zero")


@pytest.mark.parametrize(
    "arch, do_i2v, start_image, listed",
    [
        ("wan22_14b_i2v", None, True, 0),
        ("wan21_i2v", "false", False, 0),
        ("wan21", "true", False, 1),
        ("wan21", None, False, 0),
    ],
)
def test_ai_toolkit_do_i2v_becomes_start_image_on_image_to_video_archs(arch, do_i2v, start_image, listed, tmp_path):
    text = AI_TOOLKIT.replace("        is_flux: true\n", f"        arch: {arch}\n")
    if do_i2v is not None:
        text = text.replace(
            "          shuffle_tokens: false\n", f"          shuffle_tokens: false\n          do_i2v: {do_i2v}\n"
        )
    config = load_run_config(write_yaml(tmp_path / "i2v.yaml", text))
    assert config.cache["start_image"] is start_image
    assert len([entry for entry in config.unsupported if "do_i2v" in entry]) == listed


def test_ai_toolkit_switch_boundary_every_and_the_low_noise_model_become_a_two_expert_run(tmp_path):
    text = AI_TOOLKIT.replace(
        '        name_or_path: "/models/flux1-dev.safetensors"\n        is_flux: true\n',
        "        diffusion_model: /models/high.safetensors\n        low_noise_model: /models/low.safetensors\n"
        "        text_encoders: [/models/umt5.safetensors]\n        clip_type: wan\n"
        "        vae: /models/vae.safetensors\n        arch: wan22_14b\n",
    ).replace("        dtype: bf16\n", "        dtype: bf16\n        switch_boundary_every: 10\n")
    config = load_run_config(write_yaml(tmp_path / "experts.yaml", text))
    assert config.objective["switch_boundary_every"] == 10
    assert (config.model.diffusion_model, config.model.low_noise_model) == (
        "/models/high.safetensors",
        "/models/low.safetensors",
    )
    assert not [entry for entry in config.unsupported if "switch_boundary_every" in entry]


def test_a_low_noise_model_without_a_high_noise_diffusion_model_is_an_error(tmp_path):
    with pytest.raises(EriDiffusionError, match="low_noise_model is the low-noise expert"):
        load_run_config(
            write_yaml(
                tmp_path / "bad.yaml",
                "model: {checkpoint: tiny-sdxl, low_noise_model: low.safetensors}\ndataset: {folder: x}\n",
            )
        )


def test_ai_toolkit_do_audio_and_audio_loss_multiplier_become_audio_video_training(tmp_path):
    text = (
        AI_TOOLKIT.replace("        is_flux: true\n", "        audio_vae: /models/ltx2.safetensors\n")
        .replace("          shuffle_tokens: false\n", "          shuffle_tokens: false\n          do_audio: true\n")
        .replace("        dtype: bf16\n", "        dtype: bf16\n        audio_loss_multiplier: 2.0\n")
    )
    config = load_run_config(write_yaml(tmp_path / "av.yaml", text))
    assert (config.model.audio_vae, config.objective["audio_loss_weight"]) == ("/models/ltx2.safetensors", 2.0)
    without = text.replace("        audio_vae: /models/ltx2.safetensors\n", "")
    with pytest.raises(EriDiffusionError, match="do_audio is True but model.audio_vae is not given"):
        load_run_config(write_yaml(tmp_path / "no_vae.yaml", without))


def test_a_sample_lines_reference_image_is_read_relative_to_the_config_file(tmp_path, datasets_dir):
    import shutil

    from eridiffusion.headless.run import load_inputs, sample_settings

    shutil.copy(os.path.join(datasets_dir, "dreambooth_dog", "00.jpg"), tmp_path / "ref.jpg")
    path = write_yaml(
        tmp_path / "run.yaml",
        f"model: tiny-sd15\ndataset: {{folder: {datasets_dir}/dreambooth_dog}}\n"
        "sample: {prompts: ['a dog --ref ref.jpg --w 128 --seed 4'], width: 64, height: 64}\n",
    )
    config = load_run_config(path)
    (prompt,) = sample_settings(config, load_inputs(config)).renders()
    assert (prompt.references, prompt.width, prompt.height, prompt.seed) == (1, 128, 64, 4)
    missing = write_yaml(tmp_path / "missing.yaml", (tmp_path / "run.yaml").read_text().replace("ref.jpg", "nope.jpg"))
    with pytest.raises(EriDiffusionError, match=r"--ref: no image file .*nope\.jpg"):
        sample_settings(load_run_config(missing), load_inputs(config))
