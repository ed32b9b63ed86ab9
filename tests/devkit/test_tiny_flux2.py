"""The tiny FLUX.2 [dev] stack keeps ComfyUI's system-prompt template on Llama 3's vocabulary, stacks
three of its Mistral-3 encoder's hidden states, and decodes with the pretrained TAEF2."""

import os

import torch

from devkit import paths, tiny_flux2, tiny_stack

PROMPT = "a photo of sks dog"


def test_flux2_tokenizer_keeps_comfyuis_system_prompt_template(stack_of):
    _, clip, _ = stack_of("flux2")
    tokens = clip.tokenize(PROMPT)["mistral3_24b"][0]
    inner = clip.tokenizer.mistral3_24b.tokenizer
    text = inner.decode([t for t, _ in tokens])
    assert text.startswith("<|begin_of_text|>[SYSTEM_PROMPT]You are an AI that reasons about image descriptions.")
    assert text.endswith("[INST]a photo of sks dog[/INST]")
    assert max(t for t, _ in tokens) < tiny_stack.LLAMA3_VOCAB


def test_flux2_text_encoder_stacks_three_hidden_states(stack_of):
    _, clip, _ = stack_of("flux2")
    cond = clip.encode_from_tokens_scheduled(clip.tokenize(PROMPT))
    assert clip.cond_stage_model.mistral3_24b.num_layers == tiny_flux2.MISTRAL3_LAYERS
    assert cond[0][0].shape[-1] == 3 * tiny_flux2.MISTRAL3["hidden_size"]


def test_flux2_vae_is_the_pretrained_taef2(stack_of, dog_photo):
    _, _, vae = stack_of("flux2")
    weights = torch.load(os.path.join(paths.taef2_weights(), "taef2_decoder.pth"), weights_only=True)
    assert torch.equal(vae.first_stage_model.taesd_decoder[1].weight, weights["1.weight"])
    photo = dog_photo(256)
    with torch.inference_mode():
        decoded = vae.decode(vae.encode(photo))
    mse = float((decoded.clamp(0, 1) - photo).square().mean())
    assert mse < 0.05  # a random TAESD gives ~0.1-0.3; the README measured 0.024
