"""The fused backward pass (fused_backward.py): each trained tensor stepped as its gradient completes
gives the run an unfused step gives (full fine-tune and LoRA, AdamW and Adafactor, grad_accum), never
holds more than a bucket of gradients past their update, steps a resumed run's tensors as the run straight, and is
refused beside what cannot step per tensor."""

import pytest
import torch

from devkit.repeats import largest_gap, no_further_than_a_repeat
from eridiffusion.errors import EriDiffusionError
from eridiffusion.training.adapters import AdapterSpec
from eridiffusion.training.run import fused_backward
from eridiffusion.training.run.config import TrainConfig
from eridiffusion.training.run.preflight import preflight
from eridiffusion.training.run.request import RunRequest
from eridiffusion.training.run.resume import load_resume_point
from eridiffusion.training.run.trainer import train_run

FULL = AdapterSpec(algorithm="full", targets="attention", include="output_blocks")
LORA = AdapterSpec(rank=4, alpha=4.0, targets="all-linear")


def config(**values):
    settings = dict(
        steps=4,
        learning_rate=1e-3,
        dtype="fp32",
        seed=3,
        log_every=1,
        gradient_checkpointing=False,
        max_grad_norm=0.0,
        cuda_graphs="off",  # (auto replays the unfused run's steps on a GPU: fused against unfused alone)
        run_name="fused",
        adapter=FULL,
    )
    return TrainConfig(**{**settings, **values})


def run(stack, cfg, folder, resume=None):
    request = RunRequest(stack["model"], stack["data"], cfg, resume=resume)
    preflight(request)
    with torch.inference_mode(False):
        return train_run(request, str(folder))


def trained_tensors(result):
    return [p.detach().clone() for p in result.trained.parameters()]


@pytest.mark.parametrize("lora_stack", ["sd15"], indirect=True)
@pytest.mark.parametrize(
    "adapter, optimizer, grad_accum",
    [(FULL, "AdamW", 1), (FULL, "Adafactor", 2), (LORA, "AdamW", 1)],
    ids=["full-AdamW", "full-Adafactor-accum2", "lora-AdamW"],
)
def test_a_fused_run_trains_what_the_unfused_run_trains(lora_stack, adapter, optimizer, grad_accum, tmp_path):
    values = dict(adapter=adapter, optimizer=optimizer, grad_accum=grad_accum)
    plain = run(lora_stack, config(**values), tmp_path / "plain")
    fused = run(lora_stack, config(fused_backward=True, **values), tmp_path / "fused")
    # a GPU's backward sums in no fixed order: two eager LoRA runs there differ by up to 4e-5 (2026-11-30)
    rel = 1e-5 if lora_stack["model"].load_device.type == "cpu" else 2e-4
    assert fused.losses == pytest.approx(plain.losses, rel=rel)
    assert plain.losses[-1] != plain.losses[0]  # (the runs moved)
    for a, b in zip(trained_tensors(fused), trained_tensors(plain), strict=True):
        if rel == 1e-5:
            torch.testing.assert_close(a, b, rtol=rel, atol=1e-7)
            continue
        # AdamW moves an element by about the learning rate (1e-3) a step whatever its gradient's size, so
        # a near-zero gradient's GPU noise moves single elements by up to two steps and the mean by little
        # (2026-11-30, H200: means 1.8e-6 full, 5.8e-5 LoRA); a step missed or taken twice moves the mean
        # by about a step
        moved = (a - b).abs()
        assert moved.mean() <= 2.5e-4, (moved.max(), moved.mean())


@pytest.mark.parametrize("lora_stack", ["sd15"], indirect=True)
@pytest.mark.parametrize("adapter", [FULL, LORA], ids=["full", "lora"])
def test_a_fused_run_resumed_from_its_middle_checkpoint_trains_as_the_run_straight(lora_stack, adapter, tmp_path):
    """A resumed run's optimizer.load_state_dict replaces its parameter groups: the fused steps step the tensors
    in the new groups (stepping the replaced ones, the resumed run's updates were lost)."""
    cfg = config(fused_backward=True, adapter=adapter, save_every=2)
    whole = run(lora_stack, cfg, tmp_path / "whole")
    middle = load_resume_point(str(tmp_path / "whole" / "checkpoints" / "fused_step000002.safetensors"))
    resumed = run(lora_stack, cfg, tmp_path / "resumed", resume=middle)
    assert len(whole.losses) == 4
    assert [k for k, t in middle.tensors.items() if not torch.equal(t, whole.lora.tensors[k])] != []  # (3-4 moved)
    ends, stepped = dict(enumerate(trained_tensors(whole))), dict(enumerate(trained_tensors(resumed)))
    if lora_stack["model"].load_device.type == "cpu":  # bit for bit
        assert resumed.losses == whole.losses and largest_gap(stepped, ends) == 0.0
        return
    # a GPU's backward sums in no fixed order: no further apart than the run straight run again
    again = run(lora_stack, cfg, tmp_path / "again")
    no_further_than_a_repeat(resumed.losses, whole.losses, again.losses)
    no_further_than_a_repeat(stepped, ends, dict(enumerate(trained_tensors(again))))


@pytest.mark.parametrize("lora_stack", ["sd15"], indirect=True)
def test_no_gradient_outlives_its_bucket_in_a_fused_step(lora_stack, tmp_path, monkeypatch):
    """A hook after the fused one counts the gradients' bytes held after each tensor's gradient completes:
    never more than a bucket's (then stepped and freed), where an unfused step holds every one by its end;
    every tensor is stepped once a step."""
    bucket = 32 * 2**10  # (the trained weights are 434 KB in all: a step takes a dozen buckets)
    monkeypatch.setattr(fused_backward, "BUCKET_BYTES", bucket)
    held = {"most": 0, "ready": 0}
    cfg = config(fused_backward=True, steps=2)
    request = RunRequest(lora_stack["model"], lora_stack["data"], cfg)
    preflight(request)
    original = torch.Tensor.register_post_accumulate_grad_hook
    tensors = []

    def counting(self, hook):  # the run registers its hooks first; this one follows each of them
        handle = original(self, hook)
        tensors.append(self)

        def count(param):
            held["ready"] += 1
            gradients = [t.grad for t in tensors if t.grad is not None]
            held["most"] = max(held["most"], sum(g.numel() * g.element_size() for g in gradients))

        original(self, count)
        return handle

    torch.Tensor.register_post_accumulate_grad_hook = counting
    try:
        with torch.inference_mode(False):
            result = train_run(request, str(tmp_path))
    finally:
        torch.Tensor.register_post_accumulate_grad_hook = original
    sizes = [p.numel() * p.element_size() for p in result.trained.parameters()]
    assert len(tensors) == len(sizes) > 40 and sum(sizes) > 10 * bucket
    assert held["ready"] == 2 * len(tensors)
    assert 0 < held["most"] < bucket + max(sizes)
    assert all(p.grad is None for p in result.trained.parameters())


@pytest.mark.parametrize("lora_stack", ["sd15"], indirect=True)
@pytest.mark.parametrize(
    "values, named",
    [
        (dict(optimizer="Prodigy", learning_rate=1.0), "optimizer Prodigy"),
        (dict(on_nan="skip"), "on_nan skip"),
        (dict(cuda_graphs="on"), "cuda_graphs on"),
    ],
    ids=["prodigy", "skip", "graphs"],
)
def test_fused_backward_beside_what_cannot_step_per_tensor_is_refused(lora_stack, values, named, tmp_path):
    request = RunRequest(lora_stack["model"], lora_stack["data"], config(fused_backward=True, **values))
    with pytest.raises(EriDiffusionError, match=f"fused_backward.*{named}.*fused_backward off"):
        preflight(request)
    assert not list(tmp_path.iterdir())


def test_each_tensor_is_clipped_to_max_grad_norm_on_its_own():
    """SGD at lr 1 moves each tensor by its clipped gradient: one of norm 4 scaled to 1, one of norm 0.5 kept."""
    big, small = (torch.nn.Parameter(torch.zeros(4)) for _ in range(2))
    optimizer = torch.optim.SGD([big, small], lr=1.0)
    fused = fused_backward.FusedBackward(optimizer, [big, small], max_grad_norm=1.0)
    with fused.stepping():
        (big * torch.full((4,), 2.0)).sum().add((small * torch.full((4,), 0.25)).sum()).backward()
    torch.testing.assert_close(big.detach(), torch.full((4,), -0.5))
    torch.testing.assert_close(small.detach(), torch.full((4,), -0.25))
    torch.testing.assert_close(fused.step_norm("cpu"), torch.tensor((16.0 + 0.25) ** 0.5))
