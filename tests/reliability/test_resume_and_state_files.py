"""Issue 11, severe 1 and 2, and the state-file cases: resuming through ComfyUI's executor (which runs
every node under torch.inference_mode) continues a run exactly; a training-state file is never
unpickled, and one that is damaged or not ours is refused by name."""

import os
import pickle
import shutil

import pytest
import safetensors.torch
import torch

from devkit.workflow import run_training

RESUMABLE = {
    "steps": 12,
    "save_every": 6,
    "learning_rate": 3e-3,
    "rank": 4,
    "alpha": 4.0,
    "targets": "all-linear",
    "batch_size": 2,
    "seed": 3,
}


def saved(name):
    import folder_paths

    return safetensors.torch.load_file(os.path.join(folder_paths.get_folder_paths("loras")[0], name + ".safetensors"))


@pytest.mark.parametrize(
    "algorithm, text_encoder",
    [("lora", False), ("dora", False), ("lokr", False), ("loha", False), ("lora", True)],
    ids=["lora", "dora", "lokr", "loha", "lora+text_encoder"],
)
def test_resuming_through_the_executor_continues_the_run_exactly(algorithm, text_encoder, registered, photos):
    dataset = photos(4)
    name = f"resume_{algorithm}{'_te' if text_encoder else ''}"
    trainer = {**RESUMABLE, "algorithm": algorithm, "text_encoder_lr": 1e-3 if text_encoder else 0.0}
    common = dict(trainer=trainer, train_text_encoder=text_encoder)
    whole = run_training(
        dataset, name + "_whole", save={"filename_prefix": f"resume/{name}_whole", "dtype": "fp32"}, **common
    )
    assert whole.success, whole.error
    middle = os.path.join(whole.run_dir, "checkpoints", f"{name}_whole_step000006.safetensors")
    resumed = run_training(
        dataset,
        name + "_resumed",
        resume=middle,
        save={"filename_prefix": f"resume/{name}_resumed", "dtype": "fp32"},
        **common,
    )
    assert resumed.success, resumed.error
    assert len(whole.losses()) == len(resumed.losses()) == 12
    loss_difference = max(abs(a - b) for a, b in zip(whole.losses(), resumed.losses()))
    a, b = saved(f"resume/{name}_whole"), saved(f"resume/{name}_resumed")
    assert a.keys() == b.keys()
    assert any(key.startswith("lora_te_") for key in a) == text_encoder
    weight_difference = max(float((a[k] - b[k]).abs().max()) for k in a)
    print(f"{name}: max loss difference {loss_difference:.3g}, max weight difference {weight_difference:.3g}")
    assert loss_difference < 1e-6 and weight_difference < 1e-6


@pytest.fixture(scope="module")
def checkpoint(registered, datasets_dir, tmp_path_factory):
    """The step-1 checkpoint of a 2-step run (save_every=1) and its training state."""
    dataset = tmp_path_factory.mktemp("state_photos")
    for ext in (".jpg", ".txt"):
        shutil.copy(os.path.join(datasets_dir, "dreambooth_dog", "00" + ext), dataset)
    outcome = run_training(dataset, "state_files", trainer={"save_every": 1})
    assert outcome.success, outcome.error
    return os.path.join(outcome.run_dir, "checkpoints", "state_files_step000001.safetensors")


def copy_checkpoint(checkpoint, folder):
    """The checkpoint and its state copied into `folder`; returns (adapter path, state path)."""
    adapter = shutil.copy(checkpoint, folder / "copy.safetensors")
    state = shutil.copy(checkpoint[: -len(".safetensors")] + ".training_state", folder / "copy.training_state")
    return str(adapter), str(state)


def resume_error(dataset, adapter, run_name):
    outcome = run_training(dataset, run_name, resume=adapter)
    assert not outcome.success
    return outcome.error


class PlantedPayload:
    """Unpickling this creates `marker`: what a malicious state file would do."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('code ran')",)


def test_a_planted_pickled_state_never_runs_and_is_refused_by_name(checkpoint, photos, tmp_path):
    adapter, state = copy_checkpoint(checkpoint, tmp_path)
    os.remove(state)
    marker = tmp_path / "marker"
    planted = tmp_path / "copy.state.pt"
    torch.save(PlantedPayload(str(marker)), planted)
    error = resume_error(photos(1), adapter, "planted_pickle")
    assert error == (
        f"EriDiffusion_LoadLoRAForTraining: {planted} is a training state in the pickle format of earlier "
        "EriDiffusion versions, which is never opened (a pickle can run any code). To continue from "
        "copy.safetensors's weights as a new run, move copy.state.pt away; to continue a run exactly, "
        "resume from a checkpoint written by this version."
    )
    assert not marker.exists()
    # the payload is live: the unpickling that earlier versions did runs it
    torch.load(planted, weights_only=False)
    assert marker.read_text() == "code ran"


def test_a_pickle_under_the_state_files_name_is_refused_unopened(checkpoint, photos, tmp_path):
    adapter, state = copy_checkpoint(checkpoint, tmp_path)
    marker = tmp_path / "marker"
    with open(state, "wb") as f:
        pickle.dump(PlantedPayload(str(marker)), f)
    error = resume_error(photos(1), adapter, "pickle_as_state")
    assert error.startswith(
        f"EriDiffusion_LoadLoRAForTraining: training state {state} is damaged (truncated or overwritten: "
    )
    assert error.endswith(
        "); resume from another checkpoint, or move copy.training_state away to continue from "
        "copy.safetensors's weights alone as a new run."
    )
    assert not marker.exists()


@pytest.mark.parametrize("keep", [0, 100, 0.5], ids=["zero bytes", "100 bytes", "half"])
def test_a_truncated_state_file_is_refused_naming_it(keep, checkpoint, photos, tmp_path):
    adapter, state = copy_checkpoint(checkpoint, tmp_path)
    data = open(state, "rb").read()
    with open(state, "wb") as f:
        f.write(data[: int(len(data) * keep) if isinstance(keep, float) else keep])
    error = resume_error(photos(1), adapter, f"truncated_state_{keep}")
    assert error.startswith(
        f"EriDiffusion_LoadLoRAForTraining: training state {state} is damaged (truncated or overwritten: "
    )
    assert error.endswith(
        "resume from another checkpoint, or move copy.training_state away to continue from "
        "copy.safetensors's weights alone as a new run."
    )


def test_a_safetensors_file_that_is_no_training_state_is_refused(checkpoint, photos, tmp_path):
    adapter, state = copy_checkpoint(checkpoint, tmp_path)
    safetensors.torch.save_file({"x": torch.zeros(2)}, state)
    assert resume_error(photos(1), adapter, "foreign_state") == (
        f"EriDiffusion_LoadLoRAForTraining: {state} is not a training state EriDiffusion wrote (no "
        "'eridiffusion-training-state-1' format entry); resume from another checkpoint, or move copy.training_state "
        "away to continue from copy.safetensors's weights alone as a new run."
    )


def test_the_state_file_given_as_the_checkpoint_is_refused_with_the_adapters_name(checkpoint, photos, tmp_path):
    adapter, state = copy_checkpoint(checkpoint, tmp_path)
    assert resume_error(photos(1), state, "state_as_checkpoint") == (
        f"EriDiffusion_LoadLoRAForTraining: {state} is the training state of {adapter}; give the adapter file, and "
        "its state beside it is read too."
    )


def test_a_resume_lora_holding_nan_is_refused(checkpoint, photos, tmp_path):
    adapter, state = copy_checkpoint(checkpoint, tmp_path)
    tensors = {k: v.clone() for k, v in safetensors.torch.load_file(adapter).items()}  # (load_file maps the file)
    with safetensors.safe_open(adapter, "pt") as f:
        metadata = f.metadata()
    first = sorted(k for k in tensors if k.endswith("lora_up.weight"))[0]
    tensors[first][0, 0] = float("nan")
    safetensors.torch.save_file(tensors, adapter, metadata=metadata)
    assert resume_error(photos(1), adapter, "nan_resume") == (
        f"EriDiffusion_LoadLoRAForTraining: {adapter} holds NaN or infinite values (1 of its {len(tensors)} tensors, "
        f"e.g. {first}): it was saved from a diverged run. Resume from an earlier checkpoint."
    )


def test_a_checkpoint_of_another_model_is_refused_before_the_run_folder_is_made(checkpoint, photos):
    import folder_paths

    outcome = run_training(photos(1), "sd15_onto_sdxl", resume=checkpoint, architecture="sdxl")
    assert not outcome.success
    assert outcome.error.startswith(
        f"EriDiffusion_LoRATrainer: {checkpoint} holds weights for layers this run does not train ("
    )
    assert not os.path.exists(os.path.join(folder_paths.get_output_directory(), "sd15_onto_sdxl"))


def test_a_lora_whose_shapes_are_another_models_is_refused_naming_the_layer(checkpoint, photos, tmp_path):
    adapter, state = copy_checkpoint(checkpoint, tmp_path)
    os.remove(state)  # (a plain LoRA: its weights alone)
    tensors = {k: v.clone() for k, v in safetensors.torch.load_file(adapter).items()}
    with safetensors.safe_open(adapter, "pt") as f:
        metadata = f.metadata()
    down = sorted(k for k in tensors if k.endswith("lora_down.weight"))[0]
    tensors[down] = torch.zeros(tensors[down].shape[0], tensors[down].shape[1] + 8)  # a wider model's layer
    safetensors.torch.save_file(tensors, adapter, metadata=metadata)
    error = resume_error(photos(1), adapter, "wider_lora")
    prefix = down[: -len(".lora_down.weight")]
    assert error.startswith(f"EriDiffusion_LoRATrainer: {adapter}: the weights for {prefix} (up ")
    assert "do not fit this model's layer of shape" in error and error.endswith("or start a new run.")
