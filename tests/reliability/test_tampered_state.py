"""Issue 27: a training state or adapter metadata that was edited, damaged or written by something
else is one named error, read against the state's declared schema (run/run_state.py), before a model
moves; a resume the run cannot continue leaves no run folder behind. The readers are fuzzed too:
whatever bytes or structures they get, the answer is a valid state or EriDiffusion's error."""

import json
import os
import shutil

import pytest
import safetensors
import safetensors.torch
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devkit.workflow import run_training
from eridiffusion.errors import EriDiffusionError
from eridiffusion.formats.state_file import load_state, save_state
from eridiffusion.training.run.resume import load_resume_point
from eridiffusion.training.run.run_state import check_state


@pytest.fixture(scope="module")
def checkpoint(registered, datasets_dir, tmp_path_factory):
    """The step-2 checkpoint of a 3-step run of one photo, with its training state."""
    dataset = tmp_path_factory.mktemp("tampered_photos")
    for ext in (".jpg", ".txt"):
        shutil.copy(os.path.join(datasets_dir, "dreambooth_dog", "00" + ext), dataset)
    outcome = run_training(dataset, "tampered_source", trainer={"steps": 3, "save_every": 2})
    assert outcome.success, outcome.error
    return {"adapter": os.path.join(outcome.run_dir, "checkpoints", "tampered_source_step000002.safetensors")}


def copied(checkpoint, folder):
    adapter = shutil.copy(checkpoint["adapter"], folder / "copy.safetensors")
    shutil.copy(checkpoint["adapter"][: -len(".safetensors")] + ".training_state", folder / "copy.training_state")
    return str(adapter), str(folder / "copy.training_state")


FIX = (
    "resume from another checkpoint, or move copy.training_state away to continue from copy.safetensors's "
    "weights alone as a new run."
)


def damaged(state, what):
    return f"training state {state} is damaged ({what}); {FIX}"


def remove(key):
    return lambda state: state.pop(key)


def put(key, value):
    return lambda state: state.__setitem__(key, value)


TAMPERED = {
    "negative step": (put("step", -3), "its 'step' is not a whole number >= 0"),
    "no losses": (put("losses", []), "it is at step 2 but holds 0 losses"),
    "step as text": (put("step", "2"), "its 'step' is not a whole number >= 0"),
    "no optimizer": (remove("optimizer"), "it has no 'optimizer'"),
    "losses of text": (put("losses", ["a", "b"]), "its 'losses' is not a list of the steps' losses"),
    "negative batch index": (
        lambda state: state["batches"]["pending"].append([-1]),
        "its 'batches' is not the batch order's state",
    ),
    "validation after the step": (put("validation", [[9, 0.5]]), "it holds a validation check after its own step"),
    "best without a step": (put("best", {"loss": 0.1, "path": "x"}), "its 'best' is not the best validation point"),
    "world size 0": (put("world_size", 0), "its 'world_size' is not a whole number >= 1"),
    "a list, not a state": (None, "it holds no mapping of a run's state"),
}


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_a_tampered_training_state_is_one_named_error_before_anything_loads(case, checkpoint, tmp_path):
    adapter, state_file = copied(checkpoint, tmp_path)
    change, what = TAMPERED[case]
    state = load_state(state_file, adapter)
    if change is None:
        state = [state]
    else:
        change(state)
    save_state(adapter, state)
    with pytest.raises(EriDiffusionError) as refused:
        load_resume_point(adapter)
    assert str(refused.value) == damaged(state_file, what)


def test_a_tampered_state_through_the_executor_is_refused_by_the_loader_and_leaves_no_run_folder(
    checkpoint, photos, tmp_path
):
    adapter, state_file = copied(checkpoint, tmp_path)
    state = load_state(state_file, adapter)
    state["step"] = -1
    save_state(adapter, state)
    outcome = run_training(photos(1), "tampered_state_node", resume=adapter)
    assert not outcome.success
    assert outcome.error == "EriDiffusion_LoadLoRAForTraining: " + damaged(
        state_file, "its 'step' is not a whole number >= 0"
    )
    assert not os.path.exists(outcome.run_dir)


def with_metadata(adapter, **entries):
    tensors = safetensors.torch.load_file(adapter)
    tensors = {k: v.clone() for k, v in tensors.items()}  # (load_file maps the file)
    with safetensors.safe_open(adapter, "pt") as f:
        metadata = {**f.metadata(), **entries}
    safetensors.torch.save_file(tensors, adapter, metadata=metadata)


@pytest.mark.parametrize(
    "spec, reason",
    [
        ("{not json", "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
        ('{"algorithm": "lora", "rank": 4, "colour": "red"}', "AdapterSpec.__init__() got an unexpected keyword"),
        ('{"algorithm": "lora", "rank": 0}', "adapter: rank must be between 1 and 1024 (got 0)"),
        ("[1, 2]", "a list, not a mapping"),
    ],
    ids=["not JSON", "unknown field", "rank 0", "a list"],
)
def test_adapter_metadata_that_is_no_adapter_spec_is_named_with_the_fix(spec, reason, checkpoint, tmp_path):
    adapter, _ = copied(checkpoint, tmp_path)
    with_metadata(adapter, eridiffusion_adapter_spec=spec)
    with pytest.raises(EriDiffusionError) as refused:
        load_resume_point(adapter)
    message = str(refused.value)
    assert message.startswith(f"{adapter}: its metadata entry eridiffusion_adapter_spec is not an adapter's settings (")
    assert reason in message
    assert message.endswith(
        "the file was edited or written by another tool. Resume from another checkpoint, or remove that entry to "
        "continue from its weights as a plain LoRA."
    )


def test_a_resume_with_other_settings_is_refused_before_the_run_makes_its_folder(checkpoint, photos, tmp_path):
    adapter, state_file = copied(checkpoint, tmp_path)
    outcome = run_training(photos(1), "refused_resume", trainer={"steps": 3, "rank": 8}, resume=adapter)
    assert not outcome.success
    assert outcome.error == (
        f"EriDiffusion_LoRATrainer: {state_file} was written with other settings (adapter differ); use the same "
        "settings to resume, or start a new run."
    )
    assert not os.path.exists(outcome.run_dir)  # (each refused attempt left an empty folder before)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**30), 10**30) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    key=st.sampled_from(["step", "losses", "batches", "choice", "config", "best", "validation", "ema"]),
    value=JSON_VALUES,
)
def test_any_value_in_a_state_gives_a_valid_state_or_the_named_error(key, value, checkpoint, tmp_path):
    adapter, state_file = copied(checkpoint, tmp_path)
    state = load_state(state_file, adapter)
    state[key] = value
    try:
        check_state(state, state_file, adapter)
    except EriDiffusionError as error:
        assert str(error).startswith(f"training state {state_file} is damaged (")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300) | st.builds(lambda v: json.dumps(v).encode(), JSON_VALUES))
def test_any_bytes_as_a_state_file_give_the_named_error(data, checkpoint, tmp_path):
    adapter, state_file = copied(checkpoint, tmp_path)
    with open(state_file, "wb") as f:
        f.write(data)
    with pytest.raises(EriDiffusionError):
        load_resume_point(adapter)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=JSON_VALUES)
def test_any_json_as_a_state_files_document_gives_a_valid_state_or_the_named_error(value, checkpoint, tmp_path):
    adapter, state_file = copied(checkpoint, tmp_path)
    safetensors.torch.save_file(
        {"0": torch.zeros(1)},
        state_file,
        metadata={"format": "eridiffusion-training-state-1", "state": json.dumps(value)},
    )
    try:
        load_resume_point(adapter)
    except EriDiffusionError as error:
        assert "training state" in str(error)
