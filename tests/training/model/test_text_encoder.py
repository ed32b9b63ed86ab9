"""Training the text encoder(s) too: the saved file, loaded for model and clip by stock ComfyUI,
reproduces the trained conditioning and model output; the input CLIP is unchanged."""

import logging
import warnings

import comfy.model_management
import comfy.sd
import comfy.utils
import pytest
import torch

from devkit.stock_comfyui import merged_tolerance, relative_error
from devkit.tiny_models import build_tiny
from eridiffusion.training.adapters import AdapterSpec
from eridiffusion.training.data.training_data import build_training_data
from eridiffusion.training.model.inputs import batch_inputs, model_inputs
from eridiffusion.training.model.text_encoder import TextEncoderTraining
from eridiffusion.training.run.config import TrainConfig
from eridiffusion.training.run.trainer import train_lora

PROMPT = "a photo of sks dog, on a beach"


def encode(clip):
    with torch.inference_mode():
        return clip.encode_from_tokens_scheduled(clip.tokenize(PROMPT))


def model_output(patcher, conditioning, latent):
    import comfy.model_management

    with torch.inference_mode():
        comfy.model_management.load_models_gpu([patcher], force_full_load=True)
        base, device = patcher.model, patcher.load_device
        x = base.process_latent_in(latent[None]).to(device)
        inputs = batch_inputs([model_inputs(base, conditioning, x[0], device)])
        sigma = torch.tensor([2.0], device=device)
        return base.apply_model(x + 0.5 * torch.ones_like(x), sigma, **inputs).float().cpu()


@pytest.fixture(scope="module", params=["sd15", "sdxl"])
def trained(request, dog_dataset, tmp_path_factory):
    model, clip, vae = build_tiny(request.param, seed=0)
    with torch.inference_mode():
        data = build_training_data(dog_dataset, vae, clip, 128, str(tmp_path_factory.mktemp("cache")))
    data.samples = data.samples[:4]
    before = encode(clip)
    config = TrainConfig(
        gradient_checkpointing=False,
        steps=30,
        learning_rate=3e-3,
        text_encoder_lr=3e-3,
        dtype="fp32",
        log_every=10,
        adapter=AdapterSpec(rank=4, alpha=4.0, targets="all-linear"),
        run_name="te",
    )
    with torch.inference_mode(False):
        result = train_lora(model, data, config, str(tmp_path_factory.mktemp("run")), clip=clip)
    return {
        "arch": request.param,
        "model": model,
        "clip": clip,
        "data": data,
        "result": result,
        "conditioning_before": before,
    }


def test_input_clip_encodes_bit_identically_after_training(trained):
    assert torch.equal(encode(trained["clip"])[0][0], trained["conditioning_before"][0][0])


def test_trained_clip_encodes_differently_from_the_input(trained):
    assert relative_error(encode(trained["result"].clip)[0][0], trained["conditioning_before"][0][0]) > 1e-3


def test_file_uses_comfyuis_text_encoder_key_names(trained):
    keys = trained["result"].lora.tensors
    expected = ("lora_te_",) if trained["arch"] == "sd15" else ("lora_te1_", "lora_te2_")
    for prefix in expected:
        assert any(k.startswith(prefix) for k in keys), prefix
    assert any(k.startswith("lora_unet_") for k in keys)


def test_loraloader_model_and_clip_reproduce_conditioning_and_output(trained, tmp_path, caplog):
    path = trained["result"].lora.save(str(tmp_path / "te.safetensors"), dtype="fp32")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        model, clip = comfy.sd.load_lora_for_models(
            trained["model"], trained["clip"], comfy.utils.load_torch_file(path), 1.0, 1.0
        )
    assert not [r for r in caplog.records if "lora key not loaded" in r.getMessage() or "NOT LOADED" in r.getMessage()]
    ours, theirs = encode(trained["result"].clip), encode(clip)
    text_tolerance = merged_tolerance(clip.patcher)
    assert relative_error(theirs[0][0], ours[0][0]) < text_tolerance
    assert relative_error(theirs[0][1]["pooled_output"], ours[0][1]["pooled_output"]) < text_tolerance
    latent = trained["data"].samples[0].latent
    assert relative_error(
        model_output(model, theirs, latent), model_output(trained["result"].patcher, ours, latent)
    ) < merged_tolerance(model)


def waits_for_the_gpu(fn):
    """(fn(), how many times it made the host wait for the GPU: torch's sync debug warnings)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            out = fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return out, sum("synchronizing" in str(w.message) for w in caught)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="ComfyUI moves encodings to the CPU only beside a GPU")
def test_a_training_encoding_stays_on_the_gpu_and_waits_for_it_less_than_the_hosts_handover():
    """ComfyUI hands each encoding over on the CPU; the training clone's stays on its GPU (no copy to
    the CPU and back, forward or backward, each a wait for the GPU), its gradient reaches the
    adapters, the model's inputs made from it wait for the GPU neither way, and the host's own
    encodings still come on the CPU."""
    model, clip, _ = build_tiny("sdxl", seed=0)
    spec = AdapterSpec(rank=4, alpha=4.0, targets="all-linear")
    with torch.inference_mode(False):
        training = TextEncoderTraining(clip, spec, seed=0)
        for name, p in training.adapters.named_parameters():
            if "lora_up" in name:  # as trained: nonzero, so the down weights get gradients too
                torch.nn.init.normal_(p, std=0.1)
        waits, gradients = {}, {}
        for on_device in (False, True):
            training.encodings_on_device = on_device  # (SpeedPaths.encodings_on_device)
            training.adapters.zero_grad(set_to_none=True)
            training.conditioning(PROMPT)  # loads the encoder, tokenizes the caption
            (cond, options), waits[on_device] = waits_for_the_gpu(lambda: training.conditioning(PROMPT)[0])
            pooled = options["pooled_output"]
            _, waits[on_device, "backward"] = waits_for_the_gpu(
                lambda c=cond, p=pooled: (c.square().mean() + p.square().mean()).backward()
            )
            assert (cond.device.type, pooled.device.type) == (("cuda", "cuda") if on_device else ("cpu", "cpu"))
            trained = training.adapters.named_parameters()
            gradients[on_device] = {n: p.grad.clone() for n, p in trained if p.grad is not None}
        # the same adapters train, with the same gradients (CLIP-L's last layer feeds neither output)
        assert sorted(gradients[True]) == sorted(gradients[False])
        assert len(gradients[True]) > len(list(training.adapters.parameters())) // 2
        for name, gradient in gradients[True].items():
            torch.testing.assert_close(gradient, gradients[False][name], rtol=1e-4, atol=1e-6)
        # the model's inputs from it (SDXL's `y` holds the pooled output beside sizes made on the CPU)
        latent = torch.randn(4, 16, 16, device="cuda")
        conditioning = [[cond, options]]
        inputs, waits["inputs"] = waits_for_the_gpu(lambda: model_inputs(model.model, conditioning, latent, "cuda"))
        assert all(c.cond.device.type == "cuda" for c in inputs.values() if isinstance(c.cond, torch.Tensor))
        loss = sum(c.cond.float().square().mean() for c in inputs.values() if c.cond.requires_grad)
        (gradient,), waits["inputs", "backward"] = waits_for_the_gpu(lambda: torch.autograd.grad(loss, [pooled]))
        assert gradient.abs().sum() > 0
        training.unload()
    assert waits[True] < waits[False] and waits[True, "backward"] < waits[False, "backward"], waits
    assert waits["inputs"] == waits["inputs", "backward"] == 0, waits
    assert encode(clip)[0][0].device == comfy.model_management.intermediate_device() == torch.device("cpu")
