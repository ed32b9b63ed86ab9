"""Live progress events and the Stop & save route, driven by real training runs of a tiny model."""

import asyncio
import os
import threading

import pytest
import torch
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from devkit.tiny_models import build_tiny
from eridiffusion.nodes import progress
from eridiffusion.nodes.trainer_node import live_hooks
from eridiffusion.training.adapters import AdapterSpec
from eridiffusion.training.data.training_data import build_training_data
from eridiffusion.training.run.config import TrainConfig
from eridiffusion.training.run.trainer import TrainingHooks, train_lora


@pytest.fixture(scope="module")
def stack(dog_dataset, tmp_path_factory):
    model, clip, vae = build_tiny("sd15", seed=0)
    with torch.inference_mode():
        data = build_training_data(dog_dataset, vae, clip, 64, str(tmp_path_factory.mktemp("cache")))
    data.samples = data.samples[:2]
    return model, data


def config(steps, **extra):
    return TrainConfig(
        steps=steps,
        learning_rate=1e-3,
        dtype="fp32",
        log_every=5,
        run_name="live",
        adapter=AdapterSpec(rank=2, alpha=2.0),
        **extra,
    )


class FakeClock:
    """Each read advances 0.1 s: steps look like 10 a second, whatever this machine does."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        self.now += 0.1
        return self.now


def test_events_are_throttled_and_carry_every_loss_exactly_once(stack, comfy_dirs):
    model, data = stack
    sent = []
    run_dir = os.path.join(comfy_dirs["output"], "live_events")
    with torch.inference_mode(False):
        result = train_lora(model, data, config(40), run_dir + "_reference")
        reporter = progress.ProgressReporter(
            lambda event, payload: sent.append((event, payload)), "7", "p1", run_dir, clock=FakeClock()
        )
        second = train_lora(model, data, config(40), run_dir, hooks=TrainingHooks(on_progress=reporter.on_progress))
    assert second.losses == pytest.approx(result.losses)
    # 40 steps at 10 steps/s is 4 s: at most 4 events a second, plus the final one
    assert 10 <= len(sent) <= 4 * 4 + 1
    assert all(event == progress.EVENT for event, _ in sent)
    steps = [payload["step"] for _, payload in sent]
    assert steps == sorted(steps) and steps[-1] == 40
    delivered = [loss for _, payload in sent for loss in payload["losses"]]
    assert delivered == pytest.approx(second.losses)
    last = sent[-1][1]
    assert last["eta_seconds"] == 0 and last["seconds_per_step"] == pytest.approx(0.1, rel=0.05)
    assert (last["node"], last["prompt_id"], last["run"], last["total"]) == ("7", "p1", "live_events", 40)


def test_without_a_server_nothing_is_sent_and_nothing_is_built():
    reporter = progress.ProgressReporter(None, "1", "p", "/tmp/run")
    reporter.on_progress(1, 10, [0.5], {"lr": 1e-3})
    assert reporter.events_sent == 0 and reporter.pending_losses == []


def test_stop_route_ends_the_run_at_a_step_boundary_with_the_adapter_saved(stack, tmp_path):
    model, data = stack
    app = web.Application()
    routes = web.RouteTableDef()
    progress.register_routes(routes)
    app.add_routes(routes)
    reached_step_3 = threading.Event()
    stop_sent = threading.Event()
    outcome = {}

    def train():
        with live_hooks("12", 500, str(tmp_path)) as hooks, torch.inference_mode(False):
            base_progress = hooks.on_progress

            def on_progress(step, total, losses, stats):
                base_progress(step, total, losses, stats)
                if step == 3:
                    reached_step_3.set()
                    stop_sent.wait(timeout=60)

            hooks.on_progress = on_progress
            outcome["result"] = train_lora(model, data, config(500), str(tmp_path), hooks=hooks)

    worker = threading.Thread(target=train)
    worker.start()
    assert reached_step_3.wait(timeout=120)

    async def post_stop():
        async with TestClient(TestServer(app)) as client:
            bad = await client.post("/eridiffusion/stop", json={"node_id": "12"})
            good = await client.post("/eridiffusion/stop", json={"prompt_id": "headless", "node_id": "12"})
            return bad.status, good.status, await good.json()

    statuses = asyncio.run(post_stop())
    stop_sent.set()
    worker.join(timeout=300)
    assert statuses == (400, 200, {"stopping": True})
    result = outcome["result"]
    # asked while step 3 was reporting: the run ends at the next step boundary, after step 4
    assert len(result.losses) == 4
    assert os.path.basename(result.checkpoints[-1]) == "live_step000004.safetensors"
    assert os.path.exists(result.checkpoints[-1])


def test_loss_route_serves_a_runs_history_and_nothing_outside_output(stack, comfy_dirs):
    model, data = stack
    run_dir = os.path.join(comfy_dirs["output"], "history_run")
    with torch.inference_mode(False):
        result = train_lora(model, data, config(10), run_dir)
    app = web.Application()
    routes = web.RouteTableDef()
    progress.register_routes(routes)
    app.add_routes(routes)

    async def get(*runs):
        async with TestClient(TestServer(app)) as client:
            answers = []
            for run in runs:
                response = await client.get("/eridiffusion/loss", params={"run": run})
                answers.append((response.status, await response.json()))
            return answers

    (status, body), (outside, refusal) = asyncio.run(get("history_run", "../../etc"))
    assert status == 200 and body["loss"] == pytest.approx(result.losses) and body["samples"] == []
    assert (outside, refusal["error"]) == (
        400,
        "run must be a folder name inside ComfyUI's output folder (no slashes or control characters)",
    )


def test_validation_points_reach_the_page_live_and_from_the_loss_route(stack, comfy_dirs):
    import dataclasses

    from eridiffusion.training.data.training_data import TrainingData

    model, data = stack
    held_out = TrainingData(data.samples[:1], data.empty_conditioning, 0.0, 1, data.resolution, "")
    data = dataclasses.replace(data, validation=held_out)
    sent = []
    run_dir = os.path.join(comfy_dirs["output"], "validation_events")
    reporter = progress.ProgressReporter(
        lambda event, payload: sent.append(payload), "7", "p1", run_dir, clock=FakeClock()
    )
    with torch.inference_mode(False):
        result = train_lora(
            model, data, config(6, validate_every=4), run_dir, hooks=TrainingHooks(on_progress=reporter.on_progress)
        )
    assert [step for step, _ in result.validation] == [4, 6]
    assert [point for payload in sent for point in payload["validation"]] == result.validation
    app = web.Application()
    routes = web.RouteTableDef()
    progress.register_routes(routes)
    app.add_routes(routes)

    async def get():
        async with TestClient(TestServer(app)) as client:
            response = await client.get("/eridiffusion/loss", params={"run": "validation_events"})
            return response.status, await response.json()

    status, body = asyncio.run(get())
    assert status == 200 and body["validation"] == result.validation
