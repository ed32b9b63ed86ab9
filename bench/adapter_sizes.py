"""Trainable parameter counts of each adapter algorithm at rank 16 on full-size SDXL, computed
from shapes (the model is built on torch's meta device: no weights, no GPU; the adapters are
real). Prints one `RESULT {json}` line (LyCORIS logs to stdout too).

    python -m bench.adapter_sizes
"""

import json

from bench.full_size import SDXL_UNET


def main():
    from eridiffusion.runtime import start_host_in_temp_dir

    start_host_in_temp_dir("eridiffusion-sizes-")
    import comfy.model_patcher
    import comfy.supported_models
    import torch

    from eridiffusion.formats.lora_file import loadable_weight_keys
    from eridiffusion.training.adapters import AdapterSpec, attach_adapters

    config = comfy.supported_models.SDXL(dict(SDXL_UNET))
    config.set_inference_dtype(torch.bfloat16, None)
    model = config.get_model({}, device="meta")
    patcher = comfy.model_patcher.ModelPatcher(
        model, load_device=torch.device("meta"), offload_device=torch.device("meta")
    )
    keys = loadable_weight_keys(model).keys()
    rows = []
    cases = [("lora", {}), ("dora", {}), ("loha", {}), ("lokr", {}), ("lokr", {"lokr_full_rank": True})]
    for algorithm, extra in cases:
        for targets in ("attention", "all-linear"):
            for conv_rank in (0, 16):
                spec = AdapterSpec(
                    algorithm=algorithm,
                    rank=16,
                    alpha=16.0,
                    targets=targets,
                    conv_rank=conv_rank,
                    conv_alpha=16.0,
                    **extra,
                )
                adapters = attach_adapters(patcher.clone(), spec, keys)  # adapters on the CPU, model on meta
                rows.append(
                    {
                        "algorithm": algorithm + (" (full rank)" if extra else ""),
                        "targets": targets,
                        "conv_rank": conv_rank,
                        "layers": len(adapters.layer_names),
                        "parameters": sum(p.numel() for p in adapters.parameters()),
                    }
                )
    print(
        "RESULT",
        json.dumps(
            {
                "model": "SDXL (full size, meta device)",
                "rank": 16,
                "base_parameters": sum(p.numel() for p in model.diffusion_model.parameters()),
                "rows": rows,
            }
        ),
    )


if __name__ == "__main__":
    main()
