"""A model's trained weights saved as ComfyUI's own loaders read them: the checkpoint (SaveFineTune's layout,
CheckpointSave's) in stock CheckpointLoaderSimple and the diffusion model alone in stock UNETLoader give the
trained MODEL's output, on an SD1.5 whose widths stock detection knows (devkit/checkpoint_models.py)."""

import os

import pytest
import safetensors
import torch

from devkit.checkpoint_models import loadable_sd15, unet_output
from devkit.stock_comfyui import merged_tolerance, relative_error
from eridiffusion.formats.checkpoint_file import checkpoint_of
from eridiffusion.training.adapters import AdapterSpec
from eridiffusion.training.trained import TrainedSetup, trained_weights


@pytest.fixture(scope="module")
def changed():
    """(input MODEL, its output before, the MODEL with changed attention weights, their diffusion model file,
    the VAE): the copies moved by a seeded step, as an optimizer moves them."""
    model, vae = loadable_sd15()
    before = unet_output(model)
    spec = AdapterSpec(algorithm="full", targets="attention")
    with torch.inference_mode(False):
        trained = trained_weights(TrainedSetup(model.clone(), spec, seed=0))
        generator = torch.Generator().manual_seed(3)
        with torch.no_grad():
            for tensor in trained.parameters():
                step = torch.randn(tensor.shape, generator=generator).to(tensor.device)
                tensor.add_(0.05 * tensor.abs().mean() * step)
    result = model.clone()
    trained.apply_to(result)
    return model, before, result, trained.file_content({"eridiffusion_test": "stock loaders"}), vae


def saved(file, folder, name, dtype="fp32"):
    import folder_paths

    path = os.path.join(folder_paths.get_folder_paths(folder)[0], "eridiffusion_tests", name + ".safetensors")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return file.save(path, dtype=dtype, overwrite=True)


def test_the_checkpoint_loads_in_stock_checkpointloadersimple_and_gives_the_trained_output(changed):
    import nodes  # ComfyUI's own

    model, before, result, file, vae = changed
    path = saved(checkpoint_of(file, None, vae), "checkpoints", "fine_tune")
    with safetensors.safe_open(path, "pt") as f:
        keys, metadata = set(f.keys()), f.metadata()
    assert metadata["eridiffusion_trained"] == "weights" and metadata["eridiffusion_test"] == "stock loaders"
    assert {k.split(".")[0] for k in keys} == {"model", "first_stage_model"}
    loaded, _, loaded_vae = nodes.CheckpointLoaderSimple().load_checkpoint("eridiffusion_tests/fine_tune.safetensors")
    trained_output = unet_output(result)
    # (a GPU computes the stock model in half precision)
    assert relative_error(unet_output(loaded), trained_output) < merged_tolerance(result, 1e-5, 5e-3)
    assert relative_error(trained_output, before) > 1e-3  # (the weights changed the output)
    assert torch.equal(unet_output(model), before)  # the input MODEL computes as before
    assert loaded_vae is not None


def test_the_diffusion_model_loads_in_stock_unetloader_and_gives_the_trained_output(changed):
    import nodes

    _, _, result, file, _ = changed
    saved(file, "diffusion_models", "fine_tune")
    loaded = nodes.UNETLoader().load_unet("eridiffusion_tests/fine_tune.safetensors", "default")[0]
    assert relative_error(unet_output(loaded), unet_output(result)) < merged_tolerance(result, 1e-5, 5e-3)


def test_a_bf16_checkpoint_holds_bf16_weights_and_loads_close_to_the_trained_output(changed):
    import nodes

    _, _, result, file, vae = changed
    path = saved(checkpoint_of(file, None, vae), "checkpoints", "fine_tune_bf16", dtype="bf16")
    with safetensors.safe_open(path, "pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys() if k.startswith("model.")} == {"BF16"}
    loaded = nodes.CheckpointLoaderSimple().load_checkpoint("eridiffusion_tests/fine_tune_bf16.safetensors")[0]
    error = relative_error(unet_output(loaded), unet_output(result))
    print(f"bf16 checkpoint relative error {error:.3g}")
    assert error < 2e-2


def test_an_fp8_file_holds_float8_matrices_and_loads_as_the_trained_weights_rounded_to_fp8(changed):
    """fp8_e4m3fn: every weight matrix and kernel of the diffusion model in float8, the rest (and the VAE) in
    bf16; stock UNETLoader and CheckpointLoaderSimple load the trained weights as fp8 holds them."""
    import nodes

    _, _, result, file, vae = changed
    unet = saved(file, "diffusion_models", "fine_tune_fp8", dtype="fp8_e4m3fn")
    checkpoint = saved(checkpoint_of(file, None, vae), "checkpoints", "fine_tune_fp8", dtype="fp8_e4m3fn")
    for path, prefix in ((unet, ""), (checkpoint, "model.diffusion_model.")):
        with safetensors.safe_open(path, "pt") as f:
            dtypes = {k: f.get_slice(k).get_dtype() for k in f.keys()}
        matrices = {k for k, v in file.tensors.items() if k.endswith(".weight") and v.dim() >= 2}
        assert {dtypes[prefix + k] for k in matrices} == {"F8_E4M3"}
        assert {v for k, v in dtypes.items() if k.removeprefix(prefix) not in matrices} == {"BF16"}
    assert os.path.getsize(unet) < 0.6 * os.path.getsize(saved(file, "diffusion_models", "fine_tune_b", "bf16"))
    loaded = nodes.UNETLoader().load_unet("eridiffusion_tests/fine_tune_fp8.safetensors", "default")[0]
    from_checkpoint = nodes.CheckpointLoaderSimple().load_checkpoint("eridiffusion_tests/fine_tune_fp8.safetensors")
    for model in (loaded, from_checkpoint[0]):
        weights = model.model.diffusion_model.state_dict()
        for key in matrices:
            rounded = file.tensors[key].to(torch.float8_e4m3fn).float()
            assert torch.equal(weights[key].float().cpu(), rounded), key
    # fp8 keeps 3 mantissa bits: on this tiny random SD1.5 the output moves by 12% of its size (measured 0.118;
    # bf16's file 0.8%), the price of the fp8 files users load
    error = relative_error(unet_output(loaded), unet_output(result))
    assert error < 0.2


def test_an_fp8_save_of_weights_beyond_fp8s_range_is_refused_and_writes_nothing(tmp_path):
    from eridiffusion.errors import EriDiffusionError
    from eridiffusion.formats.model_file import DiffusionModelFile

    file = DiffusionModelFile({"out.weight": torch.full((2, 2), 1000.0), "out.bias": torch.zeros(2)})
    path = str(tmp_path / "model.safetensors")
    refused = "too large for fp8_e4m3fn, which holds at most 448; save as bf16 or fp32"  # (not clipped to 448)
    with pytest.raises(EriDiffusionError, match=refused):
        file.save(path, dtype="fp8_e4m3fn")
    assert not os.listdir(tmp_path)
