"""Whether a training run gives back the GPU memory it took: RUNS text-encoder runs (tiny SDXL by
default, CUDA graphs on) in one process, each followed by the unloading a ComfyUI session does
between prompts; after each, the bytes still allocated against the baseline before the first, and
the CUDA tensors alive that were not alive before (count, bytes, and what holds the largest).
Prints one `RESULT {json}` line and writes $OUT/memory_returned.json. GRAPHS=off runs without CUDA
graphs; CLEAR_CUBLAS=1 also clears torch's cuBLAS workspaces by hand after each run (what pinned the
graphs' memory before speed/cuda_graphs.release_graph_memory did it: no Python tensor held it).

    COMFYUI_PATH=... RUNS=5 python3 bench/memory_returned.py
"""

import gc
import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def cuda_tensors():
    import torch

    found = {}
    for obj in gc.get_objects():
        try:
            if isinstance(obj, torch.Tensor) and obj.is_cuda:
                found[id(obj)] = obj
        except ReferenceError:
            continue
    return found


def holders(tensor, depth=3):
    """The chain of referrer types above `tensor` (first referrer at each level), for a report."""
    chain, current = [], tensor
    for _ in range(depth):
        referrers = [r for r in gc.get_referrers(current) if not isinstance(r, (list, type(sys._getframe())))]
        if not referrers:
            break
        current = referrers[0]
        chain.append(type(current).__name__ + (f"({sorted(current)[:4]})" if isinstance(current, dict) else ""))
    return chain


def main():
    from eridiffusion.runtime import start_host_in_temp_dir

    start_host_in_temp_dir("eridiffusion-memory-")
    import comfy.model_management
    import torch

    from devkit.paths import shared_datasets
    from devkit.tiny_models import build_tiny
    from eridiffusion.training.data.dataset import load_dataset
    from eridiffusion.training.data.training_data import build_training_data
    from eridiffusion.training.run.config import train_config_from
    from eridiffusion.training.run.trainer import train_lora

    model, clip, vae = build_tiny(os.environ.get("ARCH", "sdxl"), seed=0)
    with torch.inference_mode():
        dataset = load_dataset(os.path.join(shared_datasets(), "dreambooth_dog"))
        data = build_training_data(dataset, vae, clip, 128, tempfile.mkdtemp())
    settings = {"steps": 4, "text_encoder_lr": 1e-4, "cuda_graphs": os.environ.get("GRAPHS", "on"), "dtype": "bf16"}

    def settle():
        comfy.model_management.unload_all_models()
        gc.collect()
        torch.cuda.synchronize()
        comfy.model_management.soft_empty_cache()
        if os.environ.get("CLEAR_CUBLAS"):
            torch._C._cuda_clearCublasWorkspaces()
            torch.cuda.empty_cache()

    settle()
    baseline, before = torch.cuda.memory_allocated(), set(cuda_tensors())
    rows = []
    for run in range(int(os.environ.get("RUNS", "5"))):
        config = train_config_from({**settings, "run_name": f"memory_{run}"})
        with torch.inference_mode(False):
            train_lora(model, data, config, tempfile.mkdtemp(), clip=clip)
        settle()
        alive = cuda_tensors()
        new = [t for i, t in alive.items() if i not in before]
        new.sort(key=lambda t: -t.numel() * t.element_size())
        rows.append(
            {
                "run": run + 1,
                "allocated_over_baseline_MiB": (torch.cuda.memory_allocated() - baseline) / 2**20,
                "new_cuda_tensors": len(new),
                "new_bytes_MiB": sum(t.numel() * t.element_size() for t in new) / 2**20,
                "largest": [{"shape": list(t.shape), "dtype": str(t.dtype), "held_by": holders(t)} for t in new[:5]],
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    result = {"device": torch.cuda.get_device_name(), "settings": settings, "rows": rows}
    print("RESULT", json.dumps(result))
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "memory_returned.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
