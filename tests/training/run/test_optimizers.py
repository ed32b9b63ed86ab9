"""Every optimizer a LoRA maker expects: those that run on this CPU train a tiny SD1.5 model on
real photos, those that cannot are refused with the fix before any training work starts."""

import os

import pytest
import torch

from eridiffusion.errors import EriDiffusionError
from eridiffusion.training.adapters import AdapterSpec
from eridiffusion.training.run.config import TrainConfig
from eridiffusion.training.run.optimizers import OPTIMIZERS, check_optimizer_runs, make_optimizer
from eridiffusion.training.run.trainer import train_lora

pytestmark = pytest.mark.one_host("the optimizers' own code")

# A learning rate and step count per optimizer that lower the tiny model's evaluation loss: Lion's
# sign update takes ~3x less lr than Adam's; Prodigy's lr multiplies its own step size, which
# starts at 1e-6 and needs ~100 steps to grow (20 steps leave the loss unchanged).
RUNS_ON_CPU = {
    "AdamW": (3e-3, 20),
    "AdamW8bit": (3e-3, 20),
    "Lion": (1e-3, 20),
    "Lion8bit": (1e-3, 20),
    "Adafactor": (3e-3, 20),
    "Prodigy": (1.0, 120),
}
NEEDS_CUDA = ("PagedAdamW", "PagedAdamW8bit")


@pytest.fixture(scope="module")
def tiny_sd15(dog_dataset, tmp_path_factory):
    from devkit.tiny_models import build_tiny
    from eridiffusion.training.data.training_data import build_training_data

    model, clip, vae = build_tiny("sd15", seed=0)
    with torch.inference_mode():  # as ComfyUI runs nodes
        data = build_training_data(dog_dataset, vae, clip, 128, str(tmp_path_factory.mktemp("optimizers_cache")))
    data.samples = data.samples[:4]
    return model, data


def train(tiny_sd15, name, learning_rate, steps, run_dir):
    model, data = tiny_sd15
    config = TrainConfig(
        gradient_checkpointing=False,
        steps=steps,
        learning_rate=learning_rate,
        optimizer=name,
        dtype="fp32",
        seed=0,
        log_every=steps,
        adapter=AdapterSpec(rank=8, alpha=8.0, targets="all-linear"),
        run_name=f"optimizer_{name}",
    )
    with torch.inference_mode(False):
        return train_lora(model, data, config, str(run_dir))


def test_every_optimizer_is_either_trained_or_refused_on_cpu():
    assert sorted([*RUNS_ON_CPU, *NEEDS_CUDA]) == sorted(OPTIMIZERS)
    assert len(OPTIMIZERS) == 8


@pytest.mark.parametrize("name", list(RUNS_ON_CPU))
def test_training_lowers_the_evaluation_loss_at_least_5_percent(name, tiny_sd15, tmp_path):
    learning_rate, steps = RUNS_ON_CPU[name]
    result = train(tiny_sd15, name, learning_rate, steps, tmp_path)
    assert len(result.losses) == steps
    assert result.eval_loss_after < 0.95 * result.eval_loss_before, (result.eval_loss_before, result.eval_loss_after)


@pytest.mark.parametrize("name, learning_rate", [("AdamW8bit", 3e-2), ("Lion8bit", 3e-2)])
def test_8bit_optimizer_keeps_uint8_state_on_cpu_and_fits_a_weight(name, learning_rate):
    # Most of the tiny model's LoRA tensors are under 4096 elements, which bitsandbytes keeps in
    # 32 bits; a 64x64 weight gets the 8-bit state.
    target = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
    weight = torch.nn.Parameter(torch.zeros(64, 64))
    optimizer = make_optimizer(name, [weight], learning_rate, 0.0, torch.device("cpu"))
    first = float(((weight.detach() - target) ** 2).mean())
    for _ in range(20):
        loss = ((weight - target) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert optimizer.state[weight]["state1"].dtype == torch.uint8
    assert float(((weight.detach() - target) ** 2).mean()) < 0.7 * first


@pytest.mark.parametrize(
    "name, settings",
    [
        ("AdamW", {"fused": True}),  # fused on CPUs too: its step counters never come back to the host
        ("AdamW8bit", {}),
        ("PagedAdamW", {}),
        ("PagedAdamW8bit", {}),
        ("Lion", {}),
        ("Lion8bit", {}),
        ("Prodigy", {"safeguard_warmup": True, "use_bias_correction": True}),
        ("Adafactor", {"relative_step": False, "scale_parameter": False, "warmup_init": False}),
    ],
)
def test_make_optimizer_builds_the_named_class_with_the_lora_settings(name, settings):
    optimizer = make_optimizer(name, [torch.nn.Parameter(torch.zeros(4, 4))], 2e-3, 0.05, torch.device("cpu"))
    group = optimizer.param_groups[0]
    assert type(optimizer).__name__ == name
    assert (group["lr"], group["weight_decay"]) == (2e-3, 0.05)
    assert {key: group[key] for key in settings} == settings


@pytest.mark.parametrize(
    "name, paged, bits",
    [
        ("AdamW8bit", False, 8),
        ("PagedAdamW", True, 32),
        ("PagedAdamW8bit", True, 8),
        ("Lion", False, 32),
        ("Lion8bit", False, 8),
    ],
)
def test_bitsandbytes_optimizer_is_paged_and_8bit_as_its_name_says(name, paged, bits):
    optimizer = make_optimizer(name, [torch.nn.Parameter(torch.zeros(4, 4))], 2e-3, 0.05, torch.device("cpu"))
    assert (optimizer.is_paged, optimizer.args.optim_bits) == (paged, bits)


def test_prodigy_refuses_parameter_groups_with_different_learning_rates():
    def groups(text_encoder_lr):
        return [
            {"params": [torch.nn.Parameter(torch.zeros(4))], "lr": 1.0},
            {"params": [torch.nn.Parameter(torch.zeros(4))], "lr": text_encoder_lr},
        ]

    with pytest.raises(EriDiffusionError) as info:
        make_optimizer("Prodigy", groups(0.5), 1.0, 0.01, torch.device("cpu"))
    assert str(info.value) == (
        "optimizer Prodigy needs one learning rate for every parameter group (got [0.5, 1.0]): "
        "give the text encoder the model's learning rate (1.0) or 0."
    )
    for text_encoder_lr in (1.0, 0.0):  # what Prodigy itself steps with
        optimizer = make_optimizer("Prodigy", groups(text_encoder_lr), 1.0, 0.01, torch.device("cpu"))
        for group in optimizer.param_groups:
            group["params"][0].grad = torch.ones(4)
        optimizer.step()
        assert [group["lr"] for group in optimizer.param_groups] == [1.0, text_encoder_lr]


@pytest.mark.parametrize("name", NEEDS_CUDA)
def test_paged_optimizer_on_cpu_is_refused_naming_it_and_the_fix(name):
    with pytest.raises(EriDiffusionError) as info:
        check_optimizer_runs(name, torch.device("cpu"))
    message = str(info.value)
    assert message.startswith(
        f"optimizer {name} cannot run on cpu: UserWarning: Paged optimizers are not supported on CPU."
    )
    assert message.endswith(
        f"Choose another optimizer, e.g. {name[len('Paged') :]} (the same without paging) or AdamW."
        if name != "PagedAdamW"
        else "Choose another optimizer, e.g. AdamW."
    )
    assert "\n" not in message


@pytest.mark.parametrize("name", NEEDS_CUDA)
def test_train_lora_refuses_paged_optimizer_on_cpu_before_writing_any_file(name, tiny_sd15, tmp_path):
    with pytest.raises(EriDiffusionError, match=f"^optimizer {name} cannot run on cpu: "):
        train(tiny_sd15, name, 3e-3, 20, tmp_path)
    assert os.listdir(tmp_path) == []


def test_unknown_optimizer_is_refused_listing_every_valid_name():
    expected = (
        "optimizer 'SGD' unknown; choose one of AdamW, AdamW8bit, PagedAdamW, PagedAdamW8bit, Prodigy, "
        "Adafactor, Lion, Lion8bit."
    )
    with pytest.raises(EriDiffusionError) as checked:
        check_optimizer_runs("SGD", torch.device("cpu"))
    with pytest.raises(EriDiffusionError) as made:
        make_optimizer("SGD", [torch.nn.Parameter(torch.zeros(2))], 1e-3, 0.0, torch.device("cpu"))
    assert str(checked.value) == str(made.value) == expected
    with pytest.raises(EriDiffusionError) as configured:
        TrainConfig(optimizer="SGD")
    assert all(name in str(configured.value) for name in OPTIMIZERS)
