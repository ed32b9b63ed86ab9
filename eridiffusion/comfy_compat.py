"""What differs between the ComfyUI versions EriDiffusion runs on, in one place: the executor's
cache arguments, the host's training switch, autograd for the host's fused kernels, the caches
of activations some host models keep across calls, and a clone's loading that leaves block swap's
modules to it. Every other module reaches these host internals
through here (tests/test_comfy_compat.py checks each one on every tested host; the caches,
tests/training/model/test_prefix_cache.py)."""

import contextlib
import os

import comfy.patcher_extension
import torch

from . import host

# comfy_kitchen's fused RoPE kernels (ComfyUI 0.2x+) are custom ops without a backward. Flux-style
# models switch to plain torch while `in_training` is set; others (ERNIE-Image, JoyImage) always call
# them. Rotating a pair by a 2x2 matrix has the transposed matrix as its input gradient.
_ROPE_OPS = {"apply_rope1": 1, "apply_rope_split_half1": 1, "apply_rope": 2, "apply_rope_split_half": 2}
# Its fused RMSNorm + RoPE kernels have no backward either, and Cosmos-Predict2's attention (Anima)
# always calls them. Their backward is the vector-Jacobian product of comfy_kitchen's own eager
# implementation of the same op, recomputed from the saved inputs.
_RMS_ROPE_OPS = ("rms_rope1", "rms_rope_split_half1", "rms_rope", "rms_rope_split_half")
_rope_backwards_registered: list[bool] = []


def host_version():
    """The running host's version string ("0.3.75", "0.28.0")."""
    import folder_paths

    return host.version_of(os.path.dirname(os.path.abspath(folder_paths.__file__)))


def prompt_executor(server):
    """ComfyUI's PromptExecutor without an output cache between prompts. 0.2x reads ram_inactive
    as well as ram; older versions ignore keys they do not know."""
    import execution

    return execution.PromptExecutor(
        server, cache_type=execution.CacheType.CLASSIC, cache_args={"lru": 0, "ram": 0, "ram_inactive": 0}
    )


@contextlib.contextmanager
def training_forward():
    """ComfyUI's own training switch (`model_management.in_training`, 0.2x), on for a training
    forward and backward: the host then takes its differentiable code paths."""
    import comfy.model_management  # (the host's device state: imported where it is used, not to read settings)

    register_fused_rope_backwards()
    has_switch = hasattr(comfy.model_management, "in_training")
    previous = getattr(comfy.model_management, "in_training", None)
    if has_switch:
        comfy.model_management.in_training = True
    try:
        with weights_cast_afresh():
            yield
    finally:
        if has_switch:
            comfy.model_management.in_training = previous


@contextlib.contextmanager
def weights_cast_afresh():
    """Streamed layers (weights_vram_gib: ComfyUI's partial load) cast their weights over to the GPU
    in each forward, on ComfyUI's offload streams; 0.2x casts them into one buffer per stream that the
    next layers reuse. Autograd keeps the cast weight for the backward pass, by when that buffer holds
    another layer's: the first step's gradients came out at cosine 0.07 to the true ones. Without
    offload streams (as with ComfyUI's --async-offload 0) each cast is a tensor of its own."""
    import comfy.model_management

    mm = comfy.model_management
    streams = getattr(mm, "NUM_STREAMS", 0)
    if streams:
        mm.NUM_STREAMS = 0
    try:
        yield
    finally:
        if streams:
            mm.NUM_STREAMS = streams


@contextlib.contextmanager
def encodings_kept_on(device):
    """ComfyUI's text encoders hand each encoding over on its intermediate device, the CPU unless
    the server runs with --gpu-only. Training encodes its captions with gradients at every step,
    and each such copy to the CPU and back (and their gradients' copies in the backward pass) made
    the host wait for the GPU to finish all its queued work: while the block runs, encodings stay on
    `device`, the encoder's own. (`model_management.intermediate_device`, swapped and restored.)"""
    import comfy.model_management

    mm = comfy.model_management
    original = mm.intermediate_device
    mm.intermediate_device = lambda: device
    try:
        yield
    finally:
        mm.intermediate_device = original


@contextlib.contextmanager
def flux_rope_replaced(make_rope1):
    """Flux's RoPE functions (comfy.ldm.flux.math, which Flux, Flux.2 and Chroma attend through)
    replaced for the block: apply_rope1 by `make_rope1(host's apply_rope1)`, apply_rope by the same
    applied to the query and the key; the host's functions are restored after. A host without them
    runs the block as it is."""
    import comfy.ldm.flux.math as flux_math

    if not (hasattr(flux_math, "apply_rope1") and hasattr(flux_math, "apply_rope")):
        yield
        return
    original = flux_math.apply_rope, flux_math.apply_rope1
    rope1 = make_rope1(original[1])

    def apply_rope(xq, xk, freqs_cis):
        return rope1(xq, freqs_cis), rope1(xk, freqs_cis)

    flux_math.apply_rope, flux_math.apply_rope1 = apply_rope, rope1
    try:
        yield
    finally:
        flux_math.apply_rope, flux_math.apply_rope1 = original


def _transposed(freqs):
    return freqs.transpose(-1, -2).contiguous()


def _backward_for(op_name, tensors):
    op = getattr(torch.ops.comfy_kitchen, op_name)

    def setup_context(ctx, inputs, output):
        ctx.freqs = inputs[tensors]

    def backward_one(ctx, grad):
        return op(grad.contiguous(), _transposed(ctx.freqs)), None

    def backward_pair(ctx, grad_q, grad_k):
        return (*op(grad_q.contiguous(), grad_k.contiguous(), _transposed(ctx.freqs)), None)

    return (backward_one if tensors == 1 else backward_pair), setup_context


def _recomputed_backward_for(op_name):
    from comfy_kitchen.backends.eager import rope as eager

    reference = getattr(eager, op_name)

    def setup_context(ctx, inputs, output):
        ctx.inputs = inputs

    def backward(ctx, *grads):
        wanted = [i for i, x in enumerate(ctx.inputs) if isinstance(x, torch.Tensor) and ctx.needs_input_grad[i]]
        with torch.enable_grad():
            inputs = [
                x.detach().requires_grad_(i in wanted) if isinstance(x, torch.Tensor) else x
                for i, x in enumerate(ctx.inputs)
            ]
            outputs = reference(*inputs)
            outputs = outputs if isinstance(outputs, tuple) else (outputs,)
            pairs = [(out, grad) for out, grad in zip(outputs, grads) if grad is not None]
            found = torch.autograd.grad(
                [o for o, _ in pairs], [inputs[i] for i in wanted], [g for _, g in pairs], allow_unused=True
            )
        result = [None] * len(inputs)
        for i, grad in zip(wanted, found):
            result[i] = grad
        return tuple(result)

    return backward, setup_context


def register_fused_rope_backwards():
    """Give comfy_kitchen's RoPE and RMSNorm + RoPE ops their backward (once per process; nothing
    on hosts without comfy_kitchen)."""
    if _rope_backwards_registered:
        return
    _rope_backwards_registered.append(True)
    for name, tensors in _ROPE_OPS.items():
        if not hasattr(torch.ops.comfy_kitchen, name):
            continue
        backward, setup_context = _backward_for(name, tensors)
        torch.library.register_autograd(f"comfy_kitchen::{name}", backward, setup_context=setup_context)
    for name in _RMS_ROPE_OPS:
        if not hasattr(torch.ops.comfy_kitchen, name):
            continue
        backward, setup_context = _recomputed_backward_for(name)
        torch.library.register_autograd(f"comfy_kitchen::{name}", backward, setup_context=setup_context)


def _trainable(obj, what):
    """`obj.clone()` that training can load whole, with gradients. ComfyUI 0.2x's dynamic VRAM
    (on by default on NVIDIA) gives loaded models a patcher that streams weights on demand and
    cannot be loaded whole; ComfyUI's own trainer then reloads the model as a plain patcher through
    the loader that made it, and so does this (`clone(disable_dynamic=True)`)."""
    if not (hasattr(obj, "is_dynamic") and obj.is_dynamic()):
        return obj.clone()
    try:
        return obj.clone(disable_dynamic=True)
    except RuntimeError as error:
        from .errors import EriDiffusionError

        raise EriDiffusionError(
            f"this {what} uses ComfyUI's dynamic VRAM and was not made by one of ComfyUI's loaders, "
            f"so it cannot be reloaded for training ({error}). Load it with a loader node, or "
            "start ComfyUI with --disable-dynamic-vram."
        ) from None


def trainable_model_clone(patcher):
    """A clone of a MODEL's patcher to train on (see _trainable)."""
    return _trainable(patcher, "MODEL")


def trainable_clip_clone(clip):
    """A clone of a CLIP to train its text encoder (see _trainable). ComfyUI's CLIP.clone() hands
    the clone the source's cond_stage_model even when its patcher reloaded a model of its own
    (`disable_dynamic`), so encoding would run the source's dynamic, streamed modules, without the
    adapters injected into the reloaded ones: the clone encodes with its patcher's model here."""
    clone = _trainable(clip, "CLIP")
    clone.cond_stage_model = clone.patcher.model
    return clone


# HiDream-O1 (0.28) keeps its text prefix's keys and values, and its reference images' ViT output, on
# the diffusion model across calls, keyed by the prompt's token ids and positions and the references'
# identity alone (`_kv_cache_entries`, `_visual_cache`; `clear_kv_cache()` empties both): valid while
# the weights stay as they were, not once adapters train or another patcher of the same modules runs.
PREFIX_CACHE_KEY = "eridiffusion_fresh_prefix_cache"


def _clear_prefix_cache(diffusion_model):
    clear = getattr(diffusion_model, "clear_kv_cache", None)
    if clear is not None:
        clear()


def clear_prefix_cache(base_model):
    """Empty what the host model of `base_model` (a ComfyUI BaseModel) caches across calls, so that its
    next call computes everything from its current weights (nothing for models without such a cache)."""
    _clear_prefix_cache(getattr(base_model, "diffusion_model", None))


def _fresh_prefix(executor, *args, **kwargs):
    """A DIFFUSION_MODEL wrapper: the forward starts and ends with the host model's caches empty, so it
    computes its prefix (with gradients to the adapters there) and leaves no graph behind."""
    _clear_prefix_cache(executor.class_obj)
    try:
        return executor(*args, **kwargs)
    finally:
        _clear_prefix_cache(executor.class_obj)


def prefix_cache_dropped(patcher):
    """Register on `patcher` (a clone whose adapters change between calls, or differ from the other
    patchers of its modules): every forward through its wrappers (training steps, ComfyUI's sampler)
    computes afresh what the host model would take from its cache, and the cache is emptied whenever
    ComfyUI patches or unpatches it, for calls without its wrappers and for the other patchers. Nothing
    for models without such a cache."""
    diffusion_model = getattr(patcher.model, "diffusion_model", None)
    if not hasattr(diffusion_model, "clear_kv_cache"):
        return patcher
    wrapper_type = comfy.patcher_extension.WrappersMP.DIFFUSION_MODEL
    patcher.remove_wrappers_with_key(wrapper_type, PREFIX_CACHE_KEY)
    patcher.add_wrapper_with_key(wrapper_type, PREFIX_CACHE_KEY, _fresh_prefix)

    def cleared(model_patcher):
        _clear_prefix_cache(model_patcher.model.diffusion_model)

    patcher.set_injections(PREFIX_CACHE_KEY, [comfy.patcher_extension.PatcherInjection(cleared, cleared)])
    return patcher


def host_audio_io():
    """(read, resample) of the host's audio nodes, or None where this ComfyUI has none to offer:
    LoadAudio's reader (`read(path)` → float (channels, samples), sample rate; PyAV, ComfyUI 0.2x's
    comfy_extras.nodes_audio.load) and VAEEncodeAudio's resampler (torchaudio.functional.resample).
    Older hosts read audio through torchaudio's own loader, and some installs lack torchaudio."""
    try:
        import comfy_extras.nodes_audio as nodes_audio
        import torchaudio
    except ImportError:
        return None
    if not callable(getattr(nodes_audio, "load", None)):
        return None
    return nodes_audio.load, torchaudio.functional.resample


def patched_diffusion_weights(patcher):
    """{name in the diffusion model: weight} of a MODEL with its patches (LoRAs loaded on it) applied,
    copied to the CPU: what ComfyUI's checkpoint save writes. 0.2x hosts may apply patches when a weight
    is cast, not in place: their save path (model_state_dict_for_saving) computes the patched weights."""
    import comfy.model_management

    comfy.model_management.load_models_gpu([patcher], force_patch_weights=True, force_full_load=True)
    diffusion_model = patcher.model.diffusion_model
    if hasattr(patcher, "model_state_dict_for_saving"):
        weights = patcher.model_state_dict_for_saving(diffusion_model, "diffusion_model.")
    else:
        weights = diffusion_model.state_dict()
    return {name: tensor.detach().to("cpu", copy=True) for name, tensor in weights.items()}


def load_leaving_out(patcher, modules):
    """Make ComfyUI's loading of `patcher` (a training clone; its own clones are not affected) leave
    the weights of `modules` where they are (the CPU), loading the others whole: block swap places
    those itself. ComfyUI lists what it loads in `_load_list` and moves everything when loading in
    full, on every tested host; so this clone lists the others only and always loads them as a
    partial load that fits (nothing streamed)."""
    left_out = {id(m) for m in modules}
    list_all, load_all = patcher._load_list, patcher.load

    def _load_list(*args, **kwargs):
        return [entry for entry in list_all(*args, **kwargs) if id(entry[-2]) not in left_out]

    def load(device_to=None, lowvram_model_memory=0, force_patch_weights=False, full_load=False):
        return load_all(device_to, 1e32, force_patch_weights, False)

    patcher._load_list, patcher.load = _load_list, load


def clip_weights_for_saving(clip):
    """{name: tensor} of a CLIP as ComfyUI's checkpoint save reads it (its patches applied, the tokenizer's
    entries beside), copied to the CPU: 0.28's `state_dict_for_saving` computes the patched weights of
    dynamically loaded ones; older hosts' `get_sd` reads the weights the load patched in place."""
    import comfy.model_management

    comfy.model_management.load_models_gpu([clip.load_model()], force_patch_weights=True)
    read = getattr(clip, "state_dict_for_saving", None) or clip.get_sd
    return {name: tensor.detach().to("cpu", copy=True) for name, tensor in read().items()}
