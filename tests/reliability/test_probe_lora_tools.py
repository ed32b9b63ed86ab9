"""The LoRA toolbox probed with new bad inputs, as users run it (`eridiffusion lora <verb>` and the nodes
through ComfyUI's executor): damaged LoRA files, weights that are no number, models that are no
.safetensors, outputs that ComfyUI would not read. Each is refused by name before any file is written."""

import os

import folder_paths
import pytest
import safetensors.torch
import torch

from devkit.workflow import execution_error, run_prompt, widget_defaults
from eridiffusion.headless import cli
from eridiffusion.lora_tools.settings import WEIGHT

LAYER = "lora_unet_down_blocks_0_proj"
DAMAGED = "the file is damaged or was edited; re-save it from its trainer (or use an earlier save of the run)."


def write_lora(path, rank=4, shape=(8, 6), damage=None, seed=0):
    """A two-layer LoRA file (ComfyUI's keys, alpha 2); `damage(tensors)` edits it first."""
    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for index in range(2):
        prefix = f"lora_unet_down_blocks_{index}_proj"
        tensors[f"{prefix}.lora_up.weight"] = torch.randn(shape[0], rank, generator=generator)
        tensors[f"{prefix}.lora_down.weight"] = torch.randn(rank, shape[1], generator=generator)
        tensors[f"{prefix}.alpha"] = torch.tensor(2.0)
    if damage is not None:
        damage(tensors)
    safetensors.torch.save_file(tensors, str(path))
    return str(path)


def _set(name, value):
    return lambda tensors: tensors.__setitem__(f"{LAYER}.{name}", value)


def _inf_in_up(tensors):
    tensors[f"{LAYER}.lora_up.weight"][0, 0] = float("inf")


def _without(*names, **added):
    def damage(tensors):
        for name in names:
            del tensors[f"{LAYER}.{name}"]
        tensors.update({f"{LAYER}.{name}": value for name, value in added.items()})

    return damage


DAMAGES = {
    "ranks_differ": (
        _set("lora_down.weight", torch.ones(3, 6)),
        f"layer {LAYER} has lora_up (8, 4) and lora_down (3, 6), whose ranks (lora_up's second size, "
        f"lora_down's first) differ; {DAMAGED}",
    ),
    "alpha_nan": (_set("alpha", torch.tensor(float("nan"))), f"layer {LAYER}'s alpha holds NaN or infinite values"),
    "alpha_zero": (_set("alpha", torch.tensor(0.0)), f"layer {LAYER}'s alpha is 0, not one number above 0"),
    "alpha_negative": (_set("alpha", torch.tensor(-4.0)), f"layer {LAYER}'s alpha is -4, not one number above 0"),
    "alpha_vector": (_set("alpha", torch.tensor([1.0, 2.0])), f"layer {LAYER}'s alpha is (2,), not one number"),
    "weight_inf": (_inf_in_up, f"layer {LAYER}'s lora_up.weight holds NaN or infinite values; {DAMAGED}"),
    "down_missing": (_without("lora_down.weight"), f"layer {LAYER} has lora_up without lora_down; {DAMAGED}"),
    "dora_without_up": (
        _without("lora_up.weight", dora_scale=torch.ones(1, 6)),
        f"layer {LAYER} has dora_scale without lora_up; {DAMAGED}",
    ),
    "dora_scale_alone": (
        _without("lora_up.weight", "lora_down.weight", dora_scale=torch.ones(1, 6)),
        f"layer {LAYER} has dora_scale without lora_up and lora_down; {DAMAGED}",
    ),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
@pytest.mark.parametrize("verb", ["inspect", "resize", "merge"])
def test_a_damaged_lora_layer_is_refused_by_name_by_every_verb_and_nothing_is_written(damage, verb, lora_cli, tmp_path):
    edit, message = DAMAGES[damage]
    path = write_lora(tmp_path / "damaged.safetensors", damage=edit)
    output = tmp_path / "out.safetensors"
    args = {"inspect": [], "resize": ["--rank", 2, "-o", output], "merge": ["-o", output]}[verb]
    status, out, err = lora_cli(verb, path, *args)
    assert (status, out) == (cli.EXIT_ERROR, "")
    assert err.startswith(f"eridiffusion lora {verb}: error: {path}: {message}"), err
    assert not output.exists()


def test_a_lora_rank_above_its_layers_size_resizes_and_merges_to_the_layers_rank(lora_cli, tmp_path):
    # rank 10 on 8x6 layers (a wasteful but valid file): ΔW has 6 singular values at most
    path = write_lora(tmp_path / "wide.safetensors", rank=10)
    status, out, err = lora_cli("resize", path, "--rank", 9, "-o", tmp_path / "r.safetensors")
    assert status == 0, err
    assert f"  {LAYER}: rank 10 -> 6, keeps 1.0000" in out
    original, resized = (safetensors.torch.load_file(str(p)) for p in (path, tmp_path / "r.safetensors"))

    def delta(tensors):
        up, down = tensors[f"{LAYER}.lora_up.weight"], tensors[f"{LAYER}.lora_down.weight"]
        return (up @ down) * (tensors[f"{LAYER}.alpha"] / down.shape[0])

    assert resized[f"{LAYER}.lora_down.weight"].shape == (6, 6)
    assert torch.allclose(delta(resized), delta(original), atol=1e-4)
    other = write_lora(tmp_path / "other.safetensors", seed=1)
    status, out, err = lora_cli("merge", path, other, "--rank", 12, "-o", tmp_path / "m.safetensors")
    assert status == 0, err
    assert f"  {LAYER}: rank 14 -> 6, keeps 1.0000" in out


@pytest.mark.parametrize("weight", ["nan", "inf"])
def test_a_merge_weight_that_is_no_finite_number_is_refused_naming_the_file(weight, lora_cli, tmp_path):
    path = write_lora(tmp_path / "a.safetensors")
    status, _, err = lora_cli("merge", path, "--weights", weight, "-o", tmp_path / "m.safetensors")
    assert status == cli.EXIT_ERROR
    assert f"merge: {path} has weight {float(weight):g}, which is no finite number; give a number such as 0.8." in err
    status, _, err = lora_cli(
        "merge", path, "--weights", weight, "--into", tmp_path / "missing.safetensors", "-o", tmp_path / "c.safetensors"
    )  # refused before the checkpoint is looked at
    assert status == cli.EXIT_ERROR
    assert f"merge into a checkpoint: {path} has weight {float(weight):g}, which is no finite number" in err
    assert not (tmp_path / "m.safetensors").exists() and not (tmp_path / "c.safetensors").exists()


def test_merge_into_a_checkpoint_refuses_a_damaged_lora_before_the_checkpoint_is_loaded(lora_cli, tmp_path):
    path = write_lora(tmp_path / "inf.safetensors", damage=_inf_in_up)
    status, _, err = lora_cli(
        "merge", path, "--into", tmp_path / "missing.safetensors", "-o", tmp_path / "c.safetensors"
    )
    assert status == cli.EXIT_ERROR
    assert f"error: {path}: layer {LAYER}'s lora_up.weight holds NaN or infinite values" in err


def _model_file(path, weight):
    safetensors.torch.save_file({"a.weight": weight, "b.weight": torch.ones(3)}, str(path))
    return str(path)


def test_extract_refuses_a_model_that_is_no_safetensors_file_naming_it(lora_cli, tmp_path):
    tuned = _model_file(tmp_path / "tuned.safetensors", torch.ones(4, 4))
    (tmp_path / "text.safetensors").write_text("hello")  # 5 bytes: no 8-byte header length
    whole = (tmp_path / "tuned.safetensors").read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(whole[: len(whole) - 20])
    for name, why in (("text", "header too small"), ("cut", "incomplete metadata, file not fully covered")):
        base = tmp_path / f"{name}.safetensors"
        status, _, err = lora_cli("extract", base, tuned, "--rank", 2, "-o", tmp_path / "e.safetensors")
        assert status == cli.EXIT_ERROR
        assert f"error: {base} cannot be read as a .safetensors model (Error while deserializing header: {why})" in err
    assert not (tmp_path / "e.safetensors").exists()


def test_extract_refuses_non_finite_weights_naming_the_weight_and_the_file(lora_cli, tmp_path):
    base = _model_file(tmp_path / "base.safetensors", torch.ones(4, 4))
    tuned = _model_file(tmp_path / "tuned.safetensors", torch.full((4, 4), float("nan")))
    status, _, err = lora_cli("extract", base, tuned, "--rank", 2, "-o", tmp_path / "e.safetensors")
    assert status == cli.EXIT_ERROR
    assert f"extract: a.weight holds NaN or infinite values in {tuned}; nothing was written." in err
    assert not (tmp_path / "e.safetensors").exists()


@pytest.mark.parametrize(
    "device, message",
    [
        ("tpu", "extract: device 'tpu' is no device PyTorch knows; give cpu or cuda."),
        ("meta", "extract: device 'meta'; the SVDs run on cpu or cuda."),
    ],
)
def test_extract_refuses_a_device_it_cannot_run_on_before_reading_the_models(device, message, lora_cli, tmp_path):
    base = _model_file(tmp_path / "base.safetensors", torch.ones(4, 4))
    tuned = _model_file(tmp_path / "tuned.safetensors", torch.eye(4))
    status, _, err = lora_cli("extract", base, tuned, "--rank", 2, "--device", device, "-o", tmp_path / "e.safetensors")
    assert (status, err) == (cli.EXIT_ERROR, f"eridiffusion lora extract: error: {message}\n")


def test_an_output_folder_is_named_as_a_folder_with_or_without_force(lora_cli, tmp_path):
    path = write_lora(tmp_path / "a.safetensors")
    for force in ((), ("--force",)):
        status, _, err = lora_cli("resize", path, "--rank", 2, "-o", tmp_path, *force)
        assert (status, err) == (
            cli.EXIT_ERROR,
            f"eridiffusion lora resize: error: {tmp_path} is a folder; give the output file's name.\n",
        )


@pytest.mark.parametrize("name", ["out.ckpt", "out", "out.safetensors.tmp"])
def test_an_output_comfyui_would_not_read_as_safetensors_is_refused_and_not_written(name, lora_cli, tmp_path):
    path = write_lora(tmp_path / "a.safetensors")
    output = tmp_path / name
    status, _, err = lora_cli("resize", path, "--rank", 2, "-o", output)
    assert status == cli.EXIT_ERROR
    stem = str(output)[: -len(os.path.splitext(name)[1])] if "." in name else str(output)
    assert err == (
        f"eridiffusion lora resize: error: {output}: the output is written as .safetensors, which ComfyUI tells by "
        f"the file's extension; give a name ending in .safetensors (e.g. {stem}.safetensors).\n"
    )
    assert not output.exists()


def test_a_peft_folder_without_its_adapter_config_is_refused_naming_the_missing_file(lora_cli, tmp_path):
    folder = tmp_path / "peft"
    folder.mkdir()
    safetensors.torch.save_file(
        {"base_model.model.x.lora_A.weight": torch.ones(2, 4), "base_model.model.x.lora_B.weight": torch.ones(4, 2)},
        str(folder / "adapter_model.safetensors"),
    )
    for verb, args in (("inspect", ()), ("convert", ("--model", "tiny-sd15", "-o", tmp_path / "c.safetensors"))):
        status, _, err = lora_cli(verb, folder, *args)
        assert status == cli.EXIT_ERROR
        assert f"error: {folder} holds adapter_model.safetensors but no adapter_config.json, which holds its " in err
    empty = tmp_path / "empty"
    empty.mkdir()
    status, _, err = lora_cli("inspect", empty)
    assert f"error: {empty} is a folder without adapter_model.safetensors; give a LoRA .safetensors file" in err


def _node_error(node_type, inputs):
    prompt = {"1": {"class_type": node_type, "inputs": {**widget_defaults(node_type), **inputs}}}
    executor, _ = run_prompt(prompt)
    assert not executor.success
    return execution_error(executor)


def test_the_resize_node_refuses_a_damaged_lora_naming_the_layer(registered, tmp_path):
    path = write_lora(tmp_path / "damaged.safetensors", damage=_set("alpha", torch.tensor([1.0, 2.0])))
    error = _node_error("EriDiffusion_ResizeLoRA", {"lora": path, "rank": 2, "output": "probe/r", "overwrite": True})
    assert error.startswith(f"EriDiffusion_ResizeLoRA: {path}: layer {LAYER}'s alpha is (2,), not one number")
    assert not os.path.exists(os.path.join(folder_paths.get_folder_paths("loras")[0], "probe", "r.safetensors"))


def test_the_merge_node_refuses_a_weight_that_is_no_number(registered, tmp_path):
    path = write_lora(tmp_path / "a.safetensors")
    error = _node_error("EriDiffusion_MergeLoRAs", {"loras": f"{path}: nan", "output": "probe/m", "overwrite": True})
    assert error == (
        f"EriDiffusion_MergeLoRAs: merge: {path} has weight nan, which is no finite number; give a number such as 0.8."
    )


def test_convert_refuses_a_lora_whose_layer_widths_are_another_models(lora_cli, tmp_path):
    # an SD1.5 LoRA given an SD2 model has the same layer names and other widths; here one layer of the
    # demo SD1.5's time embedding (128x32) carries a 131-row change
    path = tmp_path / "wider.safetensors"
    layer = "lora_unet_time_embed_0"
    safetensors.torch.save_file(
        {
            f"{layer}.lora_up.weight": torch.ones(131, 4),
            f"{layer}.lora_down.weight": torch.ones(4, 32),
            f"{layer}.alpha": torch.tensor(4.0),
        },
        str(path),
    )
    status, _, err = lora_cli("convert", path, "--model", "tiny-sd15", "-o", tmp_path / "c.safetensors")
    assert status == cli.EXIT_ERROR
    assert err == (
        f"eridiffusion lora convert: error: {path}: layer {layer} changes a 131x32 weight, but the BaseModel weight "
        "it names is 128x32; the LoRA was made for another model (one with the same layer names, other widths): "
        "convert it with the model it was trained for.\n"
    )
    assert not (tmp_path / "c.safetensors").exists()


def _named_lora(path, layers):
    tensors = {}
    for layer in layers:
        tensors.update(
            {
                f"{layer}.lora_up.weight": torch.ones(8, 2),
                f"{layer}.lora_down.weight": torch.ones(2, 6),
                f"{layer}.alpha": torch.tensor(2.0),
            }
        )
    safetensors.torch.save_file(tensors, str(path))
    return str(path)


def test_merging_loras_of_different_model_families_is_refused_naming_each(lora_cli, tmp_path):
    # no layer in common, so no shape disagrees: without the check their union was written
    flux = _named_lora(tmp_path / "flux.safetensors", ["lora_unet_double_blocks_0_img_attn_qkv"])
    sdxl = _named_lora(tmp_path / "sdxl.safetensors", ["lora_unet_input_blocks_4_1_transformer_blocks_0_attn1_to_q"])
    status, _, err = lora_cli("merge", flux, sdxl, "-o", tmp_path / "m.safetensors")
    assert (status, err) == (
        cli.EXIT_ERROR,
        f"eridiffusion lora merge: error: merge: the LoRAs are of different models by their layer names ({flux}: "
        f"Flux; {sdxl}: SD1.x/SDXL UNet); merge LoRAs of one model.\n",
    )
    assert not (tmp_path / "m.safetensors").exists()


def test_loras_of_one_model_whose_names_tell_its_family_apart_differently_still_merge(lora_cli, tmp_path):
    # a Flux.2 LoRA of its attention alone reads as Flux; one with its modulation as Flux.2
    attention = _named_lora(tmp_path / "attn.safetensors", ["lora_unet_double_blocks_0_img_attn_qkv"])
    modulation = _named_lora(tmp_path / "mod.safetensors", ["lora_unet_double_stream_modulation_img_lin"])
    status, out, err = lora_cli("merge", attention, modulation, "-o", tmp_path / "m.safetensors")
    assert status == 0, err
    assert "exact merge, 2 layers" in out


def _full_changes_only(path):
    safetensors.torch.save_file(
        {"lora_unet_norm.diff": torch.ones(8), "lora_unet_norm.diff_b": torch.ones(8)}, str(path)
    )
    return str(path)


@pytest.mark.parametrize("size", [["--rank", 2], ["--energy", 0.9]])
def test_resizing_a_file_of_full_weight_changes_only_is_refused_naming_it(size, lora_cli, tmp_path):
    path = _full_changes_only(tmp_path / "norms.safetensors")
    status, _, err = lora_cli("resize", path, *size, "-o", tmp_path / "r.safetensors")
    assert (status, err) == (
        cli.EXIT_ERROR,
        f"eridiffusion lora resize: error: {path} holds no low-rank layer to resize, only full weight changes "
        "(diff); resize handles LoRA, LoCon and DoRA files (lora_up/lora_down layers, linear and conv).\n",
    )


def test_merging_files_of_full_weight_changes_only_writes_their_sum_and_says_so(lora_cli, tmp_path):
    path = _full_changes_only(tmp_path / "norms.safetensors")
    status, out, err = lora_cli("merge", path, path, "--weights", 0.5, 0.25, "-o", tmp_path / "m.safetensors")
    assert (status, err) == (0, "")
    assert (
        out
        == f"wrote {tmp_path / 'm.safetensors'}: exact merge of full weight changes (diff) only, no low-rank layer\n"
    )
    assert safetensors.torch.load_file(str(tmp_path / "m.safetensors"))["lora_unet_norm.diff"].tolist() == [0.75] * 8


def test_extract_of_models_differing_in_norms_and_biases_only_writes_them_and_says_so(lora_cli, tmp_path):
    base = _model_file(tmp_path / "base.safetensors", torch.ones(4, 4))
    safetensors.torch.save_file(
        {"a.weight": torch.ones(4, 4), "b.weight": torch.full((3,), 2.0)}, str(tmp_path / "tuned.safetensors")
    )
    status, out, err = lora_cli(
        "extract", base, tmp_path / "tuned.safetensors", "--rank", 2, "-o", tmp_path / "e.safetensors"
    )
    assert (status, err) == (0, "")
    assert out == f"wrote {tmp_path / 'e.safetensors'}: no layer as LoRA, 1 saved whole (norms, biases), 1 unchanged\n"
    assert safetensors.torch.load_file(str(tmp_path / "e.safetensors"))["diffusion_model.b.diff"].tolist() == [1.0] * 3


def test_extract_of_models_differing_only_where_no_lora_key_reaches_says_so_not_same_weights(lora_cli, tmp_path):
    safetensors.torch.save_file(
        {"a.weight": torch.ones(4, 4), "a.scale": torch.ones(4)}, str(tmp_path / "b.safetensors")
    )
    safetensors.torch.save_file(
        {"a.weight": torch.ones(4, 4), "a.scale": torch.zeros(4)}, str(tmp_path / "t.safetensors")
    )
    status, _, err = lora_cli(
        "extract", tmp_path / "b.safetensors", tmp_path / "t.safetensors", "--rank", 2, "-o", tmp_path / "e.safetensors"
    )
    assert (status, err) == (
        cli.EXIT_ERROR,
        "eridiffusion lora extract: error: extract: 1 weight(s) differ (e.g. a.scale), but no LoRA key addresses "
        "them, so there is nothing to write; a LoRA of this model cannot carry that change.\n",
    )


@pytest.mark.parametrize("weight", ["1e38", "-100.5"])
def test_a_merge_weight_past_loraloaders_strength_range_is_refused_and_nothing_is_written(weight, lora_cli, tmp_path):
    # (was: 1e38 exited 0 and wrote a LoRA scaled by 1e38)
    first, second = write_lora(tmp_path / "a.safetensors"), write_lora(tmp_path / "b.safetensors", seed=1)
    bound = f"must be between -100 and 100 (got {float(weight)!r}). {WEIGHT.info.help}"
    status, out, err = lora_cli("merge", second, first, "--weights", 1, weight, "-o", tmp_path / "m.safetensors")
    assert (status, out, err) == (
        cli.EXIT_ERROR,
        "",
        f"eridiffusion lora merge: error: merge: the weight of {first} {bound}\n",
    )
    status, _, err = lora_cli(
        "merge", first, "--weights", weight, "--into", tmp_path / "missing.safetensors", "-o", tmp_path / "c.ckpt"
    )  # refused before the checkpoint is looked at
    assert (status, err) == (
        cli.EXIT_ERROR,
        f"eridiffusion lora merge: error: merge into a checkpoint: the weight of {first} {bound}\n",
    )
    assert not (tmp_path / "m.safetensors").exists() and not (tmp_path / "c.ckpt").exists()


def test_the_merge_node_refuses_a_weight_past_loraloaders_strength_range(registered, tmp_path):
    path = write_lora(tmp_path / "a.safetensors")
    error = _node_error("EriDiffusion_MergeLoRAs", {"loras": f"{path}: 1e38", "output": "probe/m", "overwrite": True})
    bound = f"must be between -100 and 100 (got 1e+38). {WEIGHT.info.help}"
    assert error == f"EriDiffusion_MergeLoRAs: merge: the weight of {path} {bound}"
    assert not os.path.exists(os.path.join(folder_paths.get_folder_paths("loras")[0], "probe", "m.safetensors"))
