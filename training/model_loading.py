"""Loading and unloading a patcher through ComfyUI's memory manager (which patches and injects it)."""
import comfy.model_management


def load(patcher):
    comfy.model_management.load_models_gpu([patcher], force_full_load=True)


def unload(patcher):
    """Hand a training clone back so its injections come off the shared modules now."""
    for loaded in list(comfy.model_management.current_loaded_models):
        if loaded.model is patcher:
            loaded.model_unload()
            comfy.model_management.current_loaded_models.remove(loaded)
