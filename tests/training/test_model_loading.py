"""Loading a training clone through ComfyUI's memory manager (training/model_loading.py): a clone
already loaded whole is left as it is, since ComfyUI would unpatch and re-patch it (with the text
encoder trained, every encoding used to make the trainer load the diffusion model again)."""

import comfy.model_management
import comfy.patcher_extension

from eridiffusion.training import model_loading
from tests.support.tiny_models import build_tiny


def test_a_clone_loaded_whole_is_not_patched_again_until_comfyui_loads_another():
    model, clip, _ = build_tiny("sd15", seed=0)
    patcher = model.clone()
    injections = []
    patcher.set_injections(
        "count", [comfy.patcher_extension.PatcherInjection(lambda p: injections.append("in"), lambda p: None)]
    )
    try:
        model_loading.load(patcher)
        assert model_loading.loaded_whole(patcher) and injections == ["in"]
        model_loading.load(patcher)
        assert injections == ["in"]
        comfy.model_management.load_models_gpu([model.clone()], force_full_load=True)  # another clone takes the model
        assert not model_loading.loaded_whole(patcher)
        model_loading.load(patcher)
        assert injections == ["in", "in"] and model_loading.loaded_whole(patcher)
    finally:
        model_loading.unload(patcher)
    assert not model_loading.loaded_whole(patcher)
