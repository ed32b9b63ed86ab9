"""Issue 27, checked too late and raw tracebacks: what the command line and the graph can tell wrong
before any model loads or image is encoded (a save name leaving models/loras, --resume auto with
nothing to resume, an output folder that cannot be written), model files that are not what they
claim, config files YAML allows but no config means, and a start free of other packages' noise."""

import asyncio
import os
import pickle
import shutil
import subprocess

import pytest

from devkit.headless import CONFIGS, named_in, refused_train, run_cli, write_yaml
from devkit.workflow import training_prompt

pytestmark = pytest.mark.one_host("refusals made before any model loads")

TINY = os.path.join(CONFIGS, "tiny_demo.yaml")


def config(tmp_path, text, name="run.yaml"):
    return write_yaml(tmp_path / name, f"_base_: {TINY}\n{text}")


# A run these tests train only to leave a run behind (a cache, a checkpoint, a taken name): at 64 px,
# without samples (tiny_demo's 256 px made each ~15 s longer: its evaluation loss alone took 16 s).
SHORT_RUN = "cache: {resolution: 64}\nsample: null\n"


@pytest.fixture
def cli_error(tmp_path, command_line):
    """(config, *args) -> (the error line the refused command printed, the files it left in the output
    folder): run by the module's one command process, which starts torch and ComfyUI once for them all."""
    return lambda config, *args: refused_train(config, tmp_path / "out", *args, cwd=tmp_path, process=command_line)


ESCAPING = "SaveLoRA filename_prefix '../x' must be a relative name inside models/loras"


@pytest.mark.parametrize("mode", [["--dry-run"], []], ids=["dry run", "train"])
def test_a_save_prefix_leaving_models_loras_is_refused_before_anything_loads(mode, tmp_path, cli_error):
    path = config(tmp_path, "save: {filename_prefix: ../x}\n")
    error, left = cli_error(path, *mode)
    assert named_in(path, error).startswith(f"save: {ESCAPING}")
    assert left == []  # no run folder, no latent cache


def test_a_save_prefix_leaving_models_loras_fails_the_prompts_validation_before_any_node_runs(registered, photos):
    import execution

    prompt = training_prompt(photos(1), {"run_name": "validated_prefix"}, save={"filename_prefix": "../x"})
    valid, error, _, node_errors = asyncio.run(execution.validate_prompt("validation-test", prompt, None))
    assert not valid
    details = [e["details"] for node in node_errors.values() for e in node["errors"]]
    assert any(ESCAPING in detail for detail in details), details


def test_resume_auto_with_nothing_to_resume_is_refused_before_the_model_loads(tmp_path, cli_error):
    missing_model = tmp_path / "no_such_model.safetensors"  # the model is never looked at
    text = f"model: {{checkpoint: {missing_model}}}\ntrain: {{run_name: never_ran}}\n"
    error, left = cli_error(config(tmp_path, text), "--resume", "auto")
    assert error == (
        f"--resume auto: run 'never_ran' has no checkpoint with its training state in {tmp_path / 'out'}; run "
        "without --resume to start it."
    )
    assert left == []


def test_an_output_folder_that_is_a_file_or_cannot_be_written_is_named(tmp_path, command_line):
    taken = tmp_path / "taken"
    taken.write_text("a file")
    done = command_line.run("train", TINY, "--output", taken, cwd=tmp_path)
    assert done.returncode == 2
    assert f"eridiffusion: error: output folder {taken} is a file, not a folder; choose a folder" in done.stderr
    done = command_line.run("train", TINY, "--output", "/proc/eridiffusion-out", cwd=tmp_path)
    assert done.returncode == 2
    assert "eridiffusion: error: output folder /proc/eridiffusion-out cannot be written: " in done.stderr


def model_file(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content)
    return path


HEADER_CLAIMS_TOO_MUCH = (10**9).to_bytes(8, "little") + b'{"a": 1}'


@pytest.mark.parametrize(
    "name, content, problem",
    [
        ("text.safetensors", b"this is not a model\n" * 10, "it is a text file"),
        ("empty.safetensors", b"", "it holds 0 bytes"),
        ("huge_header.safetensors", HEADER_CLAIMS_TOO_MUCH, "it is truncated or damaged (its header claims"),
        ("bad_header.safetensors", (8).to_bytes(8, "little") + b"not json", "its header is not the JSON"),
    ],
    ids=["text", "empty", "header past the end", "header not JSON"],
)
def test_a_model_file_that_is_no_safetensors_is_named_with_the_fix(name, content, problem, tmp_path, cli_error):
    path = model_file(tmp_path, name, content)
    error, left = cli_error(config(tmp_path, f"model: {{checkpoint: {path}}}\n"))
    assert error.startswith(f"model.checkpoint {path} is not a .safetensors file ComfyUI can read: {problem}")
    assert error.endswith("Download it again (or give the right file).")
    assert left == []


class Payload:
    def __reduce__(self):
        return print, ("a pickle ran code",)


def test_a_pickle_checkpoint_comfyui_refuses_is_named_with_what_to_use_instead(tmp_path, cli_error):
    path = tmp_path / "model.ckpt"
    with open(path, "wb") as f:
        pickle.dump({"state_dict": Payload()}, f)
    error, _ = cli_error(config(tmp_path, f"model: {{checkpoint: {path}}}\n"))
    assert error.startswith(f"model.checkpoint {path} is a pickle checkpoint that ComfyUI will not open safely (")
    assert error.endswith("Use the model's .safetensors release, or convert the file to .safetensors.")


@pytest.mark.parametrize("key", ["checkpoint", "diffusion_model"])
@pytest.mark.parametrize("name", ["flux1-dev-Q4_K_S.gguf", "renamed.safetensors"])
def test_a_gguf_model_file_is_named_with_the_files_that_train(key, name, tmp_path, cli_error):
    # a GGUF file's start: its magic, version 3, no tensors, no metadata (what a renamed one keeps too)
    path = model_file(tmp_path, name, b"GGUF" + (3).to_bytes(4, "little") + bytes(16))
    vae = model_file(tmp_path, "vae.safetensors", b"")
    section = (
        f"checkpoint: {path}" if key == "checkpoint" else f"diffusion_model: {path}, text_encoders: [{vae}], vae: {vae}"
    )
    error, left = cli_error(config(tmp_path, f"model: {{{section}}}\n"))
    assert error.startswith(f"model.{key} {path} is a GGUF file: ComfyUI's own loaders"), error
    assert error.endswith(
        "Give the model's .safetensors release: bf16, or its fp8 / fp8_scaled file (adapters train on those layers)."
    )
    assert left == []


def test_a_folder_given_as_a_model_file_is_called_a_folder(tmp_path, cli_error):
    error, _ = cli_error(config(tmp_path, f"model: {{checkpoint: {tmp_path}}}\n"))
    assert error == f"model.checkpoint {tmp_path} is a folder; give the path of the .safetensors file in it."


BROKEN_CONFIGS = {
    "a section twice": (
        "train: {steps: 3}\ntrain: {rank: 4}\n",
        "the key 'train' is written twice in one mapping (line 2 and line 3)",
    ),
    "an alias inside itself": ("sample: &loop {prompts: [*loop]}\n", "has an alias (*name) inside the value it names"),
    "an alias bomb": (
        "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
        "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
        "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n",
        "holds more than 100000 values once its aliases (*name) are expanded",
    ),
    "a 400-digit learning rate": (
        "train: {learning_rate: " + "9" * 400 + "}\n",
        "train.learning_rate must be a number a float can hold, got 9999",
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN_CONFIGS))
def test_a_config_yaml_allows_but_no_config_means_is_named(case, tmp_path, cli_error):
    text, message = BROKEN_CONFIGS[case]
    error, left = cli_error(write_yaml(tmp_path / "broken.yaml", f"model: tiny-sdxl\n{text}"), "--dry-run")
    assert str(tmp_path / "broken.yaml") in error and message in error
    assert left == []


def test_a_config_that_is_not_utf8_is_named(tmp_path, cli_error):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("model: tiny-sdxl\ndataset: {folder: caf\xe9}\n".encode("latin-1"))
    error, _ = cli_error(path, "--dry-run")
    assert error.startswith(f"config file {path} is not UTF-8 text (byte ") and error.endswith("save it as UTF-8.")


def test_the_command_line_starts_without_other_packages_warnings(tmp_path):
    done = run_cli("train", TINY, "--dry-run", "--output", tmp_path / "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "torchaudio" not in done.stderr and "bitsandbytes" not in done.stderr, done.stderr


def test_a_file_with_the_runs_name_in_the_output_folder_sends_the_run_to_the_next_name(tmp_path, command_line):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "taken_name").write_text("not a run")
    text = f"train: {{steps: 2, run_name: taken_name}}\n{SHORT_RUN}"
    done = command_line.run("train", config(tmp_path, text), "--output", tmp_path / "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "taken_name_2" / "summary.json").is_file()


def chattr(flag, path):
    return shutil.which("chattr") and subprocess.run(["chattr", flag, path], capture_output=True).returncode == 0


def test_an_output_folder_made_read_only_after_a_run_cached_its_data_is_named_before_anything_loads(
    tmp_path, cli_error, command_line
):
    out = tmp_path / "out"
    first = command_line.run(
        "train", config(tmp_path, f"train: {{steps: 1, run_name: first}}\n{SHORT_RUN}"), "--output", out, cwd=tmp_path
    )
    assert first.returncode == 0, first.stderr
    if not chattr("+i", out):
        pytest.skip("chattr +i needs root on a file system that has the flag")
    try:
        error, left = cli_error(config(tmp_path, f"train: {{steps: 1, run_name: second}}\n{SHORT_RUN}"))
    finally:
        chattr("-i", out)
    assert error == (
        f"output folder {out} cannot be written: Operation not permitted; the folder or file is protected "
        "(read-only or immutable): make it writable for the user running ComfyUI."
    )
    assert "second" not in left and "eridiffusion_cache" in left  # (the first run's cache is all there is)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--resume", ""], "--resume is empty: give auto (the run's newest checkpoint) or a checkpoint's path."),
        (["--output", " "], "--output is empty: give the output folder (or leave --output out for ./output)."),
    ],
    ids=["resume", "output"],
)
def test_an_empty_command_line_path_is_refused_not_taken_as_the_default(args, message, tmp_path, command_line):
    done = command_line.run("train", TINY, "--dry-run", *args, cwd=tmp_path)
    assert done.returncode == 2 and f"eridiffusion: error: {message}" in done.stderr, done.stderr
    assert os.listdir(tmp_path) == []


def test_a_gpu_count_that_is_no_number_is_named(tmp_path, command_line):
    done = command_line.run("train", TINY, "--gpus", "abc", cwd=tmp_path)
    assert done.returncode == 2 and "--gpus: must be a whole number of GPUs, got 'abc'" in done.stderr, done.stderr


def test_every_model_file_is_checked_before_the_first_one_loads(tmp_path, cli_error):
    import safetensors.torch
    import torch

    unet = tmp_path / "unet.safetensors"  # a real safetensors file, which ComfyUI would take minutes over
    safetensors.torch.save_file({"w": torch.zeros(2)}, unet)
    vae = tmp_path / "no_vae.safetensors"
    text = f"model: {{diffusion_model: {unet}, text_encoders: [{unet}], vae: {vae}}}\n"
    error, left = cli_error(config(tmp_path, text), "--dry-run")
    assert error == f"model.vae {vae} does not exist; give the path of the .safetensors file."
    assert left == []


def test_a_checkpoint_of_another_model_is_refused_before_any_image_is_encoded(tmp_path, cli_error, command_line):
    sd15 = config(tmp_path, f"model: tiny-sd15\ntrain: {{steps: 1, run_name: sd15}}\n{SHORT_RUN}", "sd15.yaml")
    done = command_line.run("train", sd15, "--output", tmp_path / "first", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    checkpoint = tmp_path / "first" / "sd15" / "checkpoints" / "sd15_step000001.safetensors"
    sdxl = config(tmp_path, "model: tiny-sdxl\ntrain: {steps: 2}\ncache: {cache_folder: cache}\n", "sdxl.yaml")
    for mode in (["--dry-run"], []):
        error, left = cli_error(sdxl, "--resume", checkpoint, *mode)
        assert named_in(sdxl, error).startswith(f"{checkpoint} holds weights for layers this run does not train (")
        assert error.endswith("Resume from a checkpoint of this model, or start a new run.")
        assert left == [] and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("mode", [["--dry-run"], []], ids=["dry run", "train"])
def test_a_sample_size_the_vae_cannot_draw_is_refused_before_any_image_is_encoded(mode, tmp_path, cli_error):
    text = "sample: {prompts: a dog, width: 1001}\ncache: {cache_folder: cache}\n"
    error, left = cli_error(config(tmp_path, text), *mode)
    assert error == (
        "SampleDuringTraining: width 1001 is not a multiple of 8, the VAE's pixels per latent pixel, so the samples "
        "would be 1000 wide; set 1000 or 1008."
    )
    assert left == [] and not (tmp_path / "cache").exists()
