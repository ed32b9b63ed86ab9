"""PEFT and diffusers LoRA files in resize and merge (issue 46): files written by peft itself from a
tiny family's rank-8, alpha-4 LoRA are resized and merged in their own format, with the alphas of their
LoraConfig; peft reads the results as the exact truncation / weighted sum of what it read from the
inputs, and converted to ComfyUI's keys they give stock ComfyUI the output of the ComfyUI-keyed route."""

import pytest
import safetensors.torch
import torch

from devkit.foreign_loras import peft_deltas, write_peft
from devkit.stock_comfyui import load_with_stock_comfyui, relative_error
from eridiffusion.errors import EriDiffusionError
from eridiffusion.lora_tools.convert import convert_lora
from eridiffusion.lora_tools.merge import merge_loras
from eridiffusion.lora_tools.resize import resize_lora

FP32_TOLERANCE = 1e-5


def _diffusers_file(family_lora, tmp_path, arch="qwen_image", algorithm="lora"):
    lora = family_lora(arch, algorithm)
    return lora, write_peft(lora["model"].model, lora["path"], arch, str(tmp_path / "diffusers"), "diffusers")


def _apart(a, b):
    """‖a - b‖ / ‖b‖, 0 where both are zero (a layer the 4 steps left at lora_B's zero init)."""
    return 0.0 if float(b.norm()) == 0 and float(a.norm()) == 0 else relative_error(a, b)


def _truncated(delta, rank):
    u, s, vh = torch.linalg.svd(delta.double(), full_matrices=False)
    return ((u[:, :rank] * s[:rank]) @ vh[:rank]).float()


def test_a_diffusers_file_resized_is_the_truncation_of_what_peft_reads_from_it(family_lora, tmp_path):
    _, source = _diffusers_file(family_lora, tmp_path)
    result = resize_lora(source, str(tmp_path / "r4.safetensors"), rank=4)
    keys = safetensors.torch.load_file(result.path)
    assert keys and all(k.endswith((".lora_A.weight", ".lora_B.weight")) for k in keys)
    assert {layer.rank_after for layer in result.layers} == {4}
    assert "read a PEFT/diffusers file (lora_A/lora_B), alphas: metadata lora_adapter_metadata" in "\n".join(
        result.lines()
    )
    before, after = peft_deltas(source), peft_deltas(result.path)  # (peft computes both, from each file's config)
    assert before.keys() == after.keys() and sum(float(d.norm()) > 0 for d in before.values()) > 20
    errors = [_apart(after[name], _truncated(before[name], 4)) for name in before]
    assert max(errors) < FP32_TOLERANCE, max(errors)


def test_a_resized_diffusers_file_converted_gives_stock_comfyui_what_the_comfyui_route_gives(
    family_lora, tmp_path, caplog
):
    lora, source = _diffusers_file(family_lora, tmp_path)
    model = lora["model"].model
    peft_route = resize_lora(source, str(tmp_path / "peft_r4.safetensors"), rank=4).path
    peft_route = convert_lora(peft_route, str(tmp_path / "peft_r4_comfy.safetensors"), model).path
    comfy_route = convert_lora(source, str(tmp_path / "comfy.safetensors"), model).path
    comfy_route = resize_lora(comfy_route, str(tmp_path / "comfy_r4.safetensors"), rank=4).path
    outputs = []
    for path in (peft_route, comfy_route):
        patched, unmatched = load_with_stock_comfyui(lora["model"], path, 1.0, caplog)
        assert unmatched == []
        outputs.append(lora["probe"].output(patched))
    base = lora["probe"].output(lora["model"])
    effect = (outputs[1] - base).norm()
    assert effect > 0 and ((outputs[0] - outputs[1]).norm() / effect).item() < FP32_TOLERANCE


def test_a_peft_folder_resized_reads_its_alphas_from_adapter_config(family_lora, tmp_path):
    lora = family_lora("qwen_image")
    folder = tmp_path / "peft"
    write_peft(lora["model"].model, lora["path"], "qwen_image", str(folder), "peft")
    result = resize_lora(str(folder), str(tmp_path / "r8.safetensors"), rank=8)  # (rank 8: nothing cut)
    assert "alphas: " in "\n".join(result.lines()) and "adapter_config.json" in "\n".join(result.lines())
    written = safetensors.torch.load_file(result.path)
    original = safetensors.torch.load_file(str(folder / "adapter_model.safetensors"))
    assert written.keys() == original.keys()
    # alpha 4 at rank 8: the scale 0.5 folded into lora_B, which the file's LoraConfig (alpha = rank) keeps
    ups = [k for k in original if k.endswith("lora_B.weight")]
    products = [
        (written[k].double() @ written[k.replace("lora_B", "lora_A")].double(), original[k].double()) for k in ups
    ]
    for (product, up), k in zip(products, ups):
        expected = 0.5 * up @ original[k.replace("lora_B", "lora_A")].double()
        assert _apart(product, expected) < FP32_TOLERANCE, k


def test_diffusers_files_merge_into_one_peft_reads_as_their_weighted_sum(family_lora, tmp_path):
    lora, first = _diffusers_file(family_lora, tmp_path)
    second = write_peft(lora["model"].model, lora["path"], "qwen_image", str(tmp_path / "second"), "diffusers")
    generator = torch.Generator().manual_seed(0)  # another LoRA: lora_A moved, lora_B doubled
    doubled = {
        k: v * 2 if "lora_B" in k else v + 0.1 * torch.randn(v.shape, generator=generator)
        for k, v in safetensors.torch.load_file(second).items()
    }
    with safetensors.safe_open(second, "pt") as f:
        metadata = f.metadata()
    safetensors.torch.save_file(doubled, second, metadata=metadata)
    result = merge_loras([(first, 1.0), (second, -0.25)], str(tmp_path / "merged.safetensors"))
    assert "read a PEFT/diffusers file" in "\n".join(result.lines())
    merged, one, two = peft_deltas(result.path), peft_deltas(first), peft_deltas(second)
    assert any(float((two[name] - 2 * one[name]).norm()) > 0 for name in one)
    errors = [_apart(merged[name], one[name] - 0.25 * two[name]) for name in one]
    assert max(errors) < FP32_TOLERANCE, max(errors)


def test_a_peft_file_merged_with_a_comfyui_keyed_one_without_the_model_is_refused_naming_it(family_lora, tmp_path):
    lora, peft_file = _diffusers_file(family_lora, tmp_path)
    output = tmp_path / "merged.safetensors"
    with pytest.raises(EriDiffusionError) as refused:
        merge_loras([(peft_file, 1.0), (lora["path"], 1.0)], str(output))
    message = str(refused.value)
    assert message.startswith(f"merge: {peft_file} is a PEFT/diffusers file (lora_A/lora_B) and {lora['path']}")
    assert "Give the model the LoRAs are for (--model on the command line, the node's MODEL input)" in message
    assert not output.exists()


def test_the_cli_resizes_a_diffusers_file_and_says_what_it_read(family_lora, tmp_path, lora_cli):
    _, source = _diffusers_file(family_lora, tmp_path)
    status, out, err = lora_cli("resize", source, "--rank", 2, "-o", tmp_path / "r2.safetensors")
    assert status == 0, err
    assert "read a PEFT/diffusers file (lora_A/lora_B), alphas: metadata lora_adapter_metadata" in out
    assert all(
        k.endswith(("lora_A.weight", "lora_B.weight")) for k in safetensors.torch.load_file(tmp_path / "r2.safetensors")
    )


def test_a_peft_layer_without_its_lora_b_is_named(tmp_path):
    path = str(tmp_path / "a_only.safetensors")
    safetensors.torch.save_file({"transformer.x.lora_A.weight": torch.ones(4, 8)}, path)
    with pytest.raises(EriDiffusionError, match=r"layer transformer.x holds only lora_down.weight, no LoRA pair"):
        resize_lora(path, str(tmp_path / "out.safetensors"), rank=2)
    assert not (tmp_path / "out.safetensors").exists()
