"""A full fine-tune as users run it: LoRATrainer with algorithm full through ComfyUI's executor, SaveLoRA writing
the diffusion model to models/diffusion_models and SaveFineTune a checkpoint with the graph's CLIP and VAE; the
trained MODEL out of the executor's cache samples as the files load back, and the input MODEL is untouched."""

import json
import os
import time

import pytest
import torch

from devkit.stock_comfyui import ProbeInput, merged_tolerance, relative_error
from devkit.workflow import load_extension, node_outputs, run_prompt, training_prompt, widget_defaults

# the tiny SD1.5's every linear layer (its attention and feed-forward projections, the time embedding's)
SETTINGS = {
    "algorithm": "full",
    "targets": "all-linear",
    "steps": 40,
    "learning_rate": 2e-3,
    "batch_size": 2,
    "dtype": "fp32",
    "gradient_checkpointing": False,
    "weight_decay": 0.0,
    "fused_backward": True,  # (MemoryOptions: each weight stepped as its gradient completes, as on a small card)
    "run_name": "fine_tune_node",
}


@pytest.fixture(scope="module")
def fine_tuned(datasets_dir):
    """One graph: TinyDemoModel → LoadDataset → CacheLatents → LoRATrainer (algorithm full) → SaveLoRA, and
    SaveFineTune (checkpoint, the stack's CLIP and VAE), both in fp32; its executor and the written paths."""
    load_extension()
    prompt = training_prompt(
        os.path.join(datasets_dir, "dreambooth_dog"),
        SETTINGS,
        resolution=64,
        save={"filename_prefix": "fine_tune/unet", "dtype": "fp32", "overwrite": True},
    )
    prompt["30"] = {
        "class_type": "EriDiffusion_SaveFineTune",
        "inputs": {
            **widget_defaults("EriDiffusion_SaveFineTune"),
            "fine_tune": ["4", 1],
            "clip": ["1", 1],
            "vae": ["1", 2],
            "filename_prefix": "fine_tune/checkpoint",
            "dtype": "fp32",
            "overwrite": True,
        },
    }
    started = time.perf_counter()
    executor, _ = run_prompt(prompt)
    return {"executor": executor, "seconds": time.perf_counter() - started}


def outputs(fine_tuned, node):
    return node_outputs(fine_tuned["executor"], node)


def test_training_every_linear_weight_lowers_the_evaluation_loss_by_30_percent(fine_tuned, comfy_dirs):
    assert fine_tuned["executor"].success
    with open(os.path.join(comfy_dirs["output"], SETTINGS["run_name"], "summary.json")) as f:
        summary = json.load(f)
    before, after = summary["eval_loss_before"], summary["eval_loss_after"]
    print(f"eval loss {before:.4f} -> {after:.4f} ({after / before:.3f}); graph {fine_tuned['seconds']:.1f} s")
    assert summary["config"]["adapter"]["algorithm"] == "full" and summary["config"]["fused_backward"] is True
    assert after / before < 0.7, (before, after)


def test_the_input_model_computes_as_built_and_the_trained_model_differently(fine_tuned):
    from devkit.tiny_models import build_tiny

    model, data, trained = outputs(fine_tuned, 1)[0], outputs(fine_tuned, 3)[0], outputs(fine_tuned, 4)[0]
    probe = ProbeInput.of(model, data)
    fresh = build_tiny("sd15", seed=0)[0]  # TinyDemoModel's stack, built anew
    assert torch.equal(probe.output(model), probe.output(fresh))
    assert relative_error(probe.output(trained), probe.output(model)) > 1e-2


def test_saved_diffusion_model_loads_as_unetloader_loads_it_and_samples_as_the_trained_model(fine_tuned):
    """UNETLoader's steps (comfy.sd.load_diffusion_model) on the file, the model class the MODEL's own: stock
    detection knows SD1.5 by its full width, and the tiny one's heads no layout tells."""
    import comfy.model_detection
    import comfy.utils
    import folder_paths

    model, data, trained = outputs(fine_tuned, 1)[0], outputs(fine_tuned, 3)[0], outputs(fine_tuned, 4)[0]
    path = outputs(fine_tuned, 5)[0]
    assert path == os.path.join(folder_paths.get_folder_paths("diffusion_models")[0], "fine_tune", "unet.safetensors")
    saved, metadata = comfy.utils.load_torch_file(path, return_metadata=True)
    assert metadata["eridiffusion_trained"] == "weights" and metadata["save_dtype"] == "fp32"
    detected = comfy.model_detection.detect_unet_config(saved, "", metadata=metadata)
    own = model.model.model_config.unet_config
    assert {k: detected[k] for k in detected if k in own} == {k: own[k] for k in detected if k in own}
    error = relative_error(_loaded(model, data, saved, ""), _output(trained, model, data))
    print(f"diffusion model reload relative error {error:.3g}")
    assert error < merged_tolerance(trained, 1e-5, 5e-3)  # (a GPU computes the stock model in half precision)


def test_saved_checkpoint_holds_the_graph_s_clip_and_vae_and_samples_as_the_trained_model(fine_tuned):
    """CheckpointLoaderSimple's steps (comfy.sd.load_state_dict_guess_config after detection) on the file: the
    model under model.diffusion_model., the CLIP and VAE read back by the config's own prefixes."""
    import comfy.utils

    from devkit.tiny_models import build_tiny

    (model, clip, vae), data, trained = outputs(fine_tuned, 1), outputs(fine_tuned, 3)[0], outputs(fine_tuned, 4)[0]
    path = outputs(fine_tuned, 30)[0]
    assert path.endswith(os.path.join("checkpoints", "fine_tune", "checkpoint.safetensors"))
    saved = comfy.utils.load_torch_file(path)
    config = model.model.model_config
    vae_sd = comfy.utils.state_dict_prefix_replace(saved, {k: "" for k in config.vae_key_prefix}, filter_keys=True)
    expected_vae = vae.get_sd()
    assert vae_sd.keys() == expected_vae.keys() and all(torch.equal(vae_sd[k], expected_vae[k].cpu()) for k in vae_sd)
    loaded_clip = build_tiny("sd15", seed=1)[1]  # other random weights, which the file's replace
    with torch.inference_mode():  # (as ComfyUI's loader nodes run)
        missing, unexpected = loaded_clip.load_sd(config.process_clip_state_dict(dict(saved)), full_model=True)
    # (what ComfyUI's SD15 config leaves out of every checkpoint it saves, as SD1.5 checkpoints lack them)
    assert sorted(missing) == ["clip_l.logit_scale", "clip_l.transformer.text_projection.weight"] and not unexpected
    expected_clip, read_back = clip.get_sd(), loaded_clip.get_sd()
    assert all(torch.equal(read_back[k].cpu(), expected_clip[k].cpu()) for k in expected_clip if k not in missing)
    error = relative_error(_loaded(model, data, saved, "model.diffusion_model."), _output(trained, model, data))
    print(f"checkpoint reload relative error {error:.3g}")
    assert error < merged_tolerance(trained, 1e-5, 5e-3)  # (a GPU computes the stock model in half precision)


def _output(trained, model, data):
    return ProbeInput.of(model, data).output(trained)


def _loaded(model, data, saved, prefix):
    """The probe output of the model ComfyUI's loader builds from `saved` (keys under `prefix`)."""
    import comfy.model_management
    import comfy.model_patcher

    config = model.model.model_config
    base = config.get_model(saved, prefix)
    base.load_model_weights(saved, prefix)
    device = comfy.model_management.get_torch_device()
    patcher = comfy.model_patcher.ModelPatcher(base, load_device=device, offload_device=torch.device("cpu"))
    return ProbeInput.of(model, data).output(patcher)
