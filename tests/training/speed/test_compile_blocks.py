"""torch_compile (training/speed/compile_blocks.py): each block compiled with the adapters it calls (one
autograd node per adapted linear layer, adapters/lora_linear.py) trains what the uncompiled model
trains. Needs a CUDA device (inductor's GPU kernels; run on the GPU machine: see bench/gpu_host.sh)."""

import dataclasses

import pytest
import torch

from devkit.short_runs import short_run
from eridiffusion.training.run.trainer import train_lora

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="compiled blocks are timed and tested on CUDA")


@pytest.mark.parametrize("cuda_graphs", ["off", "on"])
def test_compiled_blocks_train_what_the_eager_model_trains(quality_stack, tmp_path, cuda_graphs):
    model, _, _, data = quality_stack
    data = dataclasses.replace(data, validation=None)
    runs = {}
    with torch.inference_mode(False):
        for compiled in (False, True):
            config = short_run(cuda_graphs, f"compiled_{compiled}", torch_compile=compiled)
            runs[compiled] = train_lora(model, data, config, str(tmp_path / str(compiled)))
    # to the GPU's noise between inductor's fused kernels and eager ones
    assert runs[True].losses == pytest.approx(runs[False].losses, rel=1e-3)
