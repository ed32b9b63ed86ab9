"""Loading and unloading a patcher through ComfyUI's memory manager (which patches and injects it)."""

import contextlib

import torch


@contextlib.contextmanager
def as_comfyui_loads():
    """Run the block under inference mode, as ComfyUI's nodes run: for any model loading, unloading
    or eviction it causes. ComfyUI made the weights under inference mode; moved outside it,
    `Module.to` gives each Parameter new data while the Parameter keeps no version counter, so it no
    longer passes for an inference tensor and any later use of it, in either mode, raises 'Inference
    tensors do not track version counter' (on a GPU: a stock VAEDecode after a run that sampled).
    Training still runs through such weights: the training clones alias them (autograd_weights.py)."""
    with torch.inference_mode():
        yield


def load(patcher, weights_vram_gib=0.0):
    """Load `patcher` on its device: whole, or with at most `weights_vram_gib` of its weights
    resident and the rest streamed from CPU memory layer by layer as its forward needs them
    (ComfyUI's partial "lowvram" loading, with its async offload streams)."""
    import comfy.model_management

    mm = comfy.model_management
    if not weights_vram_gib:
        if not loaded_whole(patcher):
            with as_comfyui_loads():
                mm.load_models_gpu([patcher], force_full_load=True)
        return
    if any(loaded.model is patcher for loaded in mm.current_loaded_models):
        return
    with as_comfyui_loads():
        _load_partly(patcher, weights_vram_gib)


def _load_partly(patcher, weights_vram_gib):
    import comfy.model_management

    mm = comfy.model_management
    # ComfyUI sizes a partial load from the device's free memory, which knows nothing of a
    # per-process memory cap; so the budget goes to its LoadedModel directly.
    budget = int(weights_vram_gib * 2**30)
    mm.free_memory(budget, patcher.load_device)
    loaded = mm.LoadedModel(patcher)
    loaded.model_load(lowvram_model_memory=budget)
    mm.current_loaded_models.insert(0, loaded)


def loaded_whole(patcher):
    """Whether `patcher` is ComfyUI's loaded model with all of its weights on its device. Loading it
    again would unpatch and re-patch it (its injections run again: with the text encoder trained,
    twice a step for nothing, since each encoding loads the CLIP beside it)."""
    import comfy.model_management

    mm = comfy.model_management
    loaded = any(entry.model is patcher for entry in mm.current_loaded_models)
    return loaded and getattr(patcher.model, "model_lowvram", True) is False


def unload(patcher):
    """Hand a training clone back so its injections come off the shared modules now."""
    import comfy.model_management

    for loaded in list(comfy.model_management.current_loaded_models):
        if loaded.model is patcher:
            with as_comfyui_loads():
                loaded.model_unload()
            comfy.model_management.current_loaded_models.remove(loaded)


# Casting a model's weights once changes no product: the per-forward cast computes the same values.
# Only same-size or smaller dtypes (an fp32 model trained in bf16 shrinks; a bf16 one trained in fp32
# keeps its cast per forward rather than doubling its memory), and never fp8 or quantized weights.
_CASTABLE = (torch.float32, torch.float16, torch.bfloat16)


def hold_weights_in(base_model, dtype):
    """Cast the frozen weights of ComfyUI model `base_model` that are in its own dtype to the compute
    `dtype`, once and in place, and make `dtype` the model's own (ComfyUI casts inputs to it, not
    weights); True if every weight is then in `dtype`. Only for a model a training run alone holds
    (dynamic VRAM's reload for training): its output MODEL samples in `dtype` too. Without it every
    forward casts every weight: an SDXL checkpoint, which ComfyUI loads in fp16 on NVIDIA, trained in
    bf16 cast its 1,680 weights each step (12 ms of a 77 ms graphed step on an H100), and each layer
    took ComfyUI's casting path in Python (samples, eager steps)."""
    model = base_model.diffusion_model
    own = base_model.get_dtype()
    if own == dtype or own not in _CASTABLE or dtype not in _CASTABLE or dtype.itemsize > own.itemsize:
        return False
    with as_comfyui_loads(), torch.no_grad():  # (as ComfyUI makes its weights)
        for module in model.modules():
            for tensor in (*module._parameters.values(), *module._buffers.values()):
                if tensor is not None and tensor.dtype == own and type(tensor.data) is torch.Tensor:
                    tensor.data = tensor.data.to(dtype)
    model.dtype = dtype
    return all(p.dtype == dtype for p in model.parameters() if p.is_floating_point())
