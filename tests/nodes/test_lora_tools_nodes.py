"""The LoRA toolbox's nodes run by ComfyUI's executor on the tiny demo SDXL: each writes its file into
ComfyUI's model folders and shows what it did on the node."""

import os
import shutil

import folder_paths
import pytest
import safetensors.torch

from devkit.foreign_loras import write_convention
from devkit.tiny_models import family_params
from devkit.workflow import execution_error, load_extension, run_prompt, widget_defaults

DEMO = {"class_type": "EriDiffusion_TinyDemoModel", "inputs": {"architecture": "sdxl", "seed": 0}}


@pytest.fixture(scope="module")
def registered():
    return load_extension()


def _run(node_type, inputs, extra=None):
    """Run the demo model and one toolbox node (plus `extra` nodes); (its shown text, the executor)."""
    prompt = {"1": DEMO, "2": {"class_type": node_type, "inputs": {**widget_defaults(node_type), **inputs}}}
    prompt.update(extra or {})
    executor, _ = run_prompt(prompt)
    assert executor.success, execution_error(executor)
    return executor.history_result["outputs"]["2"]["text"][0], executor


def _loras(name):
    return os.path.join(folder_paths.get_folder_paths("loras")[0], name)


def test_nodes_are_in_the_lora_menu(registered):
    import nodes

    names = ("InspectLoRA", "ConvertLoRA", "ResizeLoRA", "MergeLoRAs", "MergeLoRAIntoCheckpoint", "ExtractLoRA")
    assert {registered[f"EriDiffusion_{n}"].CATEGORY for n in names} == {"EriDiffusion/LoRA"}
    assert nodes.NODE_DISPLAY_NAME_MAPPINGS["EriDiffusion_ConvertLoRA"] == "Convert LoRA"


def test_convert_node_writes_comfyui_keys_from_a_onetrainer_file(registered, family_lora, tmp_path):
    lora = family_lora("sdxl")
    foreign = write_convention(
        lora["model"].model, lora["path"], "onetrainer", "sdxl", str(tmp_path / "ot.safetensors")
    )
    text, _ = _run(
        "EriDiffusion_ConvertLoRA",
        {"model": ["1", 0], "lora": foreign, "output": "tools/converted", "overwrite": True},
    )
    assert text.startswith(f"wrote {_loras('tools/converted.safetensors')}: 153 layers in ComfyUI's keys")
    assert "read 153 layers named lora_unet_<name_with_underscores> (lora)" in text
    converted = safetensors.torch.load_file(_loras("tools/converted.safetensors"))
    assert sorted(converted) == sorted(safetensors.torch.load_file(lora["path"]))


def test_resize_node_cuts_every_layer_to_the_rank(registered, family_lora):
    lora = family_lora("sdxl")
    text, _ = _run(
        "EriDiffusion_ResizeLoRA", {"lora": lora["path"], "rank": 4, "output": "tools/r4", "overwrite": True}
    )
    assert text.startswith(f"wrote {_loras('tools/r4.safetensors')}: 153 layers, rank 4-4")
    resized = safetensors.torch.load_file(_loras("tools/r4.safetensors"))
    assert {v.shape[0] for k, v in resized.items() if k.endswith("lora_down.weight")} == {4}


def test_resize_and_merge_nodes_keep_a_diffusers_file_in_its_format(registered, family_lora, tmp_path):
    from devkit.foreign_loras import write_peft

    lora = family_lora("sdxl")
    diffusers = write_peft(lora["model"].model, lora["path"], "sdxl", str(tmp_path / "diffusers"), "diffusers")
    text, _ = _run("EriDiffusion_ResizeLoRA", {"lora": diffusers, "rank": 4, "output": "tools/d4", "overwrite": True})
    assert text.startswith(f"wrote {_loras('tools/d4.safetensors')}: 153 layers, rank 4-4")
    assert "read a PEFT/diffusers file (lora_A/lora_B), alphas: metadata lora_adapter_metadata" in text
    text, _ = _run(
        "EriDiffusion_MergeLoRAs",
        {"loras": f"{diffusers}: 0.5\n{_loras('tools/d4.safetensors')}: 0.5", "output": "tools/dm", "overwrite": True},
    )
    assert text.startswith(f"wrote {_loras('tools/dm.safetensors')}: exact merge, 153 layers, rank 12-12")
    for name in ("d4", "dm"):
        keys = safetensors.torch.load_file(_loras(f"tools/{name}.safetensors"))
        assert all(k.startswith("unet.") and k.endswith((".lora_A.weight", ".lora_B.weight")) for k in keys)


def test_merge_node_with_the_model_converts_another_trainers_file_on_the_way_in(registered, family_lora, tmp_path):
    lora = family_lora("sdxl")
    foreign = write_convention(lora["model"].model, lora["path"], "onetrainer", "sdxl", str(tmp_path / "o.safetensors"))
    text, _ = _run(
        "EriDiffusion_MergeLoRAs",
        {"model": ["1", 0], "loras": f"{foreign}: 0.5\n{lora['path']}: 0.5", "output": "tools/mo", "overwrite": True},
    )
    assert f"{foreign}: read 153 layers, converted to ComfyUI's keys for SDXL" in text
    merged = safetensors.torch.load_file(_loras("tools/mo.safetensors"))
    assert sorted(merged) == sorted(safetensors.torch.load_file(lora["path"]))


def test_merge_node_merges_two_weighted_loras_exactly(registered, family_lora):
    path = family_lora("sdxl")["path"]
    text, _ = _run(
        "EriDiffusion_MergeLoRAs",
        {"loras": f"{path}: 0.5\n{path}: -0.25", "output": "tools/merged", "overwrite": True},
    )
    assert text.startswith(f"wrote {_loras('tools/merged.safetensors')}: exact merge, 153 layers, rank 16-16")


def test_inspect_node_shows_the_report(registered, family_lora):
    text, _ = _run("EriDiffusion_InspectLoRA", {"lora": family_lora("sdxl")["path"], "model": ["1", 0]})
    assert "algorithm  lora x153" in text and "not loaded 0 key(s)" in text


def test_merge_into_checkpoint_node_writes_one_checkpointloadersimple_loads_as_base_plus_lora(registered, tmp_path):
    import comfy.sd
    import comfy.utils
    import nodes  # ComfyUI's own

    from devkit.checkpoint_models import loadable_sd15, random_lora, unet_output
    from devkit.stock_comfyui import relative_error

    checkpoints = folder_paths.get_folder_paths("checkpoints")[0]
    model, vae = loadable_sd15()
    comfy.sd.save_checkpoint(os.path.join(checkpoints, "tools_base.safetensors"), model, None, vae)
    lora = random_lora(model, _loras("tools_random.safetensors"))
    prompt = {
        "1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "tools_base.safetensors"}},
        "2": {
            "class_type": "EriDiffusion_MergeLoRAIntoCheckpoint",
            "inputs": {
                **widget_defaults("EriDiffusion_MergeLoRAIntoCheckpoint"),
                "model": ["1", 0],
                "vae": ["1", 2],
                "loras": "tools_random.safetensors: 0.7",
                "output": "tools/ckpt",
                "overwrite": True,
            },
        },
    }
    executor, _ = run_prompt(prompt)
    assert executor.success, execution_error(executor)
    text = executor.history_result["outputs"]["2"]["text"][0]
    written = os.path.join(checkpoints, "tools", "ckpt.safetensors")
    assert text.splitlines()[0] == f"wrote {written}: a checkpoint with 1 LoRA(s) merged into its weights"
    with_lora, _ = comfy.sd.load_lora_for_models(model, None, comfy.utils.load_torch_file(lora), 0.7, 0)
    loaded = nodes.CheckpointLoaderSimple().load_checkpoint("tools/ckpt.safetensors")[0]
    assert relative_error(unet_output(loaded), unet_output(with_lora)) < 1e-5
    assert relative_error(unet_output(model), unet_output(with_lora)) > 1e-2


def test_extract_node_gives_back_a_lora_loraloader_applied(registered, family_lora):
    shutil.copy(family_lora("sdxl")["path"], _loras("tools_source.safetensors"))
    tuned = {
        "class_type": "LoraLoaderModelOnly",
        "inputs": {"model": ["1", 0], "lora_name": "tools_source.safetensors", "strength_model": 1.0},
    }
    text, _ = _run(
        "EriDiffusion_ExtractLoRA",
        {
            "base": ["1", 0],
            "tuned": ["3", 0],
            "rank": 8,
            "dtype": "fp32",
            "output": "tools/extracted",
            "overwrite": True,
        },
        extra={"3": tuned},
    )
    assert text.startswith(f"wrote {_loras('tools/extracted.safetensors')}: 153 layers as LoRA (rank 8-8")


@pytest.mark.parametrize("arch", family_params(("sd15", "sdxl", "flux_dev")))
def test_every_verb_takes_a_diffusers_file_of_the_family_through_the_executor(
    registered, arch, family_lora, tmp_path, caplog
):
    """One prompt per family: its tiny stack, and Inspect, Convert, Resize, Merge (the MODEL given: the file
    converted on the way in) and Merge into checkpoint of a diffusers file of the family's LoRA (written by
    peft). Each written LoRA gives stock ComfyUI the original LoRA's output; the checkpoint holds it merged."""
    from devkit import tiny_family_node
    from devkit.foreign_loras import write_peft
    from devkit.stock_comfyui import load_with_stock_comfyui, relative_error

    tiny_family_node.register()
    lora = family_lora(arch)
    source = write_peft(lora["model"].model, lora["path"], arch, str(tmp_path / "diffusers"), "diffusers")
    stack = {"class_type": tiny_family_node.NODE_NAME, "inputs": {"family": arch, "seed": 0}}
    verbs = {
        "inspect": ("EriDiffusion_InspectLoRA", {"lora": source}),
        "convert": ("EriDiffusion_ConvertLoRA", {"lora": source, "output": f"verbs/{arch}_c"}),
        "resize": ("EriDiffusion_ResizeLoRA", {"lora": source, "rank": 8, "output": f"verbs/{arch}_r"}),
        "merge": ("EriDiffusion_MergeLoRAs", {"loras": f"{source}: 0.5\n{source}: 0.5", "output": f"verbs/{arch}_m"}),
        "checkpoint": ("EriDiffusion_MergeLoRAIntoCheckpoint", {"loras": f"{source}: 1", "output": f"verbs/{arch}"}),
    }
    prompt = {"1": stack}
    for node_id, (node_type, inputs) in verbs.items():
        values = {**widget_defaults(node_type), **inputs, "model": ["1", 0], "overwrite": True}
        prompt[node_id] = {"class_type": node_type, "inputs": values}
    executor, _ = run_prompt(prompt)
    assert executor.success, execution_error(executor)
    shown = {node_id: executor.history_result["outputs"][node_id]["text"][0] for node_id in verbs}
    blocks = shown["inspect"].split("blocks     (layers: rank / alpha)\n")[1].split("metadata")[0].splitlines()
    assert {line.split(" lora: ")[1] for line in blocks} == {"rank 8 alpha 4"}  # its LoraConfig's alpha
    reference = load_with_stock_comfyui(lora["model"], lora["path"], 1.0, caplog)[0]
    for name in ("c", "r", "m"):
        patched, unmatched = load_with_stock_comfyui(
            lora["model"], _loras(f"verbs/{arch}_{name}.safetensors"), 1.0, caplog
        )
        assert unmatched == []
        assert relative_error(lora["probe"].output(patched), lora["probe"].output(reference)) < 1e-5, name
    assert "converted to ComfyUI's keys on the way in" in shown["checkpoint"]
    checkpoint = os.path.join(folder_paths.get_folder_paths("checkpoints")[0], f"verbs/{arch}.safetensors")
    assert os.path.isfile(checkpoint)
