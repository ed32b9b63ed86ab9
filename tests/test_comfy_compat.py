"""eridiffusion.comfy_compat on the running host: its executor runs prompts, its training switch is
on exactly inside a training forward, and RoPE (plain or the host's fused kernels) has the exact
gradient there."""

import json
import os
import subprocess
import sys

import comfy.ldm.flux.math
import comfy.model_management
import comfy.model_patcher
import folder_paths
import pytest
import torch

from devkit.paths import ROOT
from devkit.tiny_models import build_tiny
from devkit.workflow import execution_error, load_extension, run_prompt
from eridiffusion import comfy_compat

B, HEADS, TOKENS, DIM = 1, 2, 6, 8


def reference_rope(x, freqs, split_half=False):
    """Each pair of channels turned by its 2x2 matrix: adjacent pairs, or channel k with k + D/2."""
    if split_half:
        pairs = x.reshape(*x.shape[:-1], 2, -1).movedim(-2, -1).unsqueeze(-2)
        out = freqs[..., 0] * pairs[..., 0] + freqs[..., 1] * pairs[..., 1]
        return out.movedim(-1, -2).reshape(x.shape)
    pairs = x.reshape(*x.shape[:-1], -1, 1, 2)
    return (freqs[..., 0] * pairs[..., 0] + freqs[..., 1] * pairs[..., 1]).reshape(x.shape)


def rope_inputs(dtype=torch.float64):
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(B, HEADS, TOKENS, DIM, generator=generator, dtype=dtype, requires_grad=True)
    k = torch.randn(B, HEADS, TOKENS, DIM, generator=generator, dtype=dtype, requires_grad=True)
    positions = torch.arange(TOKENS, dtype=torch.float64)[None]
    freqs = comfy.ldm.flux.math.rope(positions, DIM, 10000)[:, None].to(dtype)  # (B, 1, L, D/2, 2, 2)
    return q, k, freqs


def gradients(outputs, inputs):
    weights = [torch.linspace(-1, 1, o.numel(), dtype=o.dtype).reshape(o.shape) for o in outputs]
    return torch.autograd.grad(sum((o * w).sum() for o, w in zip(outputs, weights)), inputs)


def test_prompt_executor_runs_a_prompt_on_this_host():
    load_extension()
    prompt = {
        "1": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
        "2": {"class_type": "SaveLatent", "inputs": {"samples": ["1", 0], "filename_prefix": "compat/probe"}},
    }
    executor, _ = run_prompt(prompt)
    assert executor.success, execution_error(executor)
    assert os.listdir(os.path.join(folder_paths.get_output_directory(), "compat"))


def test_training_forward_turns_the_hosts_training_switch_on_only_inside():
    had_switch = hasattr(comfy.model_management, "in_training")
    with comfy_compat.training_forward():
        assert getattr(comfy.model_management, "in_training", True) is True
    assert hasattr(comfy.model_management, "in_training") == had_switch
    assert getattr(comfy.model_management, "in_training", False) is False


def test_training_forward_casts_streamed_weights_afresh_without_offload_streams(monkeypatch):
    """ComfyUI 0.2x casts streamed weights into a buffer each offload stream reuses, under the
    weights autograd saved for backward (tests/training/model/test_model_loading.py shows the wrong
    gradients on a GPU): inside a training forward there are no offload streams, after it the
    host's setting is back, also when the step fails."""
    monkeypatch.setattr(comfy.model_management, "NUM_STREAMS", 2)
    with pytest.raises(RuntimeError, match="step failed"), comfy_compat.training_forward():
        assert comfy.model_management.NUM_STREAMS == 0
        assert comfy.model_management.get_offload_stream(torch.device("cuda", 0)) is None
        raise RuntimeError("step failed")
    assert comfy.model_management.NUM_STREAMS == 2


def test_flux_rope_has_the_exact_gradient_inside_a_training_forward():
    q, k, freqs = rope_inputs()
    with comfy_compat.training_forward():
        rotated = comfy.ldm.flux.math.apply_rope(q, k, freqs)
        got = gradients(rotated, (q, k))
    expected = gradients((reference_rope(q, freqs), reference_rope(k, freqs)), (q, k))
    for g, e in zip(got, expected):
        assert torch.allclose(g, e, atol=1e-12)


@pytest.mark.skipif(
    not hasattr(torch.ops.comfy_kitchen, "apply_rope1"), reason="this ComfyUI has no comfy_kitchen fused RoPE kernels"
)
@pytest.mark.parametrize("op_name", ["apply_rope1", "apply_rope", "apply_rope_split_half1", "apply_rope_split_half"])
def test_fused_rope_kernels_have_the_exact_gradient(op_name):
    comfy_compat.register_fused_rope_backwards()
    q, k, freqs = rope_inputs(torch.float32)  # the kernels take half and single precision
    op = getattr(torch.ops.comfy_kitchen, op_name)
    split_half = "split_half" in op_name
    if op_name.endswith("1"):
        got = gradients((op(q, freqs),), (q,))
        expected = gradients((reference_rope(q, freqs, split_half),), (q,))
    else:
        got = gradients(op(q, k, freqs), (q, k))
        expected = gradients((reference_rope(q, freqs, split_half), reference_rope(k, freqs, split_half)), (q, k))
    for g, e in zip(got, expected):
        assert torch.allclose(g, e, atol=1e-6)


def test_encodings_kept_on_a_device_reach_the_hosts_text_encoders_and_the_host_gets_its_device_back():
    """ComfyUI's CLIP hands its encoding over on the device encodings_kept_on names (here the meta
    device, which no host picks: the swap, not the host, put it there), also when the block fails."""
    _, clip, _ = build_tiny("sdxl", seed=0)
    own = comfy.model_management.intermediate_device()
    with torch.inference_mode(), comfy_compat.encodings_kept_on(torch.device("meta")):
        cond, options = clip.encode_from_tokens_scheduled(clip.tokenize("a photo of a dog"), show_pbar=False)[0]
    assert cond.device.type == options["pooled_output"].device.type == "meta"
    assert comfy.model_management.intermediate_device() == own
    with pytest.raises(KeyError), comfy_compat.encodings_kept_on(torch.device("meta")):
        raise KeyError("a failed encoding")
    assert comfy.model_management.intermediate_device() == own


@pytest.mark.skipif(not torch.cuda.is_available(), reason="dynamic VRAM needs a CUDA device")
@pytest.mark.skipif(not hasattr(comfy.model_patcher, "ModelPatcherDynamic"), reason="this host has no dynamic VRAM")
def test_a_text_encoder_loaded_under_dynamic_vram_trains_its_adapters():
    """ComfyUI's CLIP.clone(disable_dynamic=True) reloads the model for its patcher but keeps the
    source's module tree for encoding: the adapters went into modules that never ran, and the
    text encoder silently did not train. In a process of its own (dynamic VRAM stays on)."""
    done = subprocess.run(
        [sys.executable, "-m", "devkit.dynamic_vram"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert result["dynamic_vram"] and result["input_clip_dynamic"] and result["encodes_with_its_patchers_model"], result
    assert result["encoding_has_gradient"], result
    assert result["adapters"] > 0 and result["adapters_with_gradient"] == result["adapters"], result


@pytest.mark.skipif(not torch.cuda.is_available(), reason="dynamic VRAM needs a CUDA device")
@pytest.mark.skipif(not hasattr(comfy.model_patcher, "ModelPatcherDynamic"), reason="this host has no dynamic VRAM")
def test_a_checkpoint_reloaded_for_training_under_dynamic_vram_is_held_in_the_compute_dtype(datasets_dir):
    """CheckpointLoaderSimple loads SDXL in fp16 on NVIDIA; trained in bf16, every forward cast every
    weight (12 ms of a 77 ms step on an H100). The run's own reload is cast once: the input MODEL
    keeps its fp16 weights, the result MODEL holds bf16 ones, and no step casts an fp16 tensor."""
    done = subprocess.run(
        [sys.executable, "-m", "devkit.dynamic_vram", "held_weights", datasets_dir],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert result["dynamic_vram"] and result["input_model_dynamic"], result
    assert result["input_weight_dtypes"] == ["torch.float16"], result
    assert result["result_weight_dtypes"] == ["torch.bfloat16"], result
    assert result["fp16_casts_while_training"] == 0 and len(result["losses"]) == 4, result


def test_a_clone_loading_leaving_modules_out_lists_and_moves_only_the_others():
    """load_leaving_out: ComfyUI's own loading of the clone lists every module but those, never loads in
    full (which would move them too), and the clone counts as loaded whole; its own clones load as usual."""
    model, _, _ = build_tiny("sd15", seed=0)
    clone = model.clone()
    left_out = list(model.model.diffusion_model.output_blocks[-1].modules())
    comfy_compat.load_leaving_out(clone, left_out)
    listed = {id(entry[-2]) for entry in clone._load_list()}
    assert not listed & {id(m) for m in left_out} and listed
    weight = left_out[-1].weight if hasattr(left_out[-1], "weight") else next(left_out[0].parameters())
    before = weight.data_ptr()
    comfy.model_management.load_models_gpu([clone], force_full_load=True)
    try:
        assert clone.model.model_lowvram is False
        assert weight.device.type == "cpu" and weight.data_ptr() == before
        assert {id(entry[-2]) for entry in clone.clone()._load_list()} >= {id(m) for m in left_out if m._parameters}
    finally:
        from eridiffusion.training.model import loading

        loading.unload(clone)
