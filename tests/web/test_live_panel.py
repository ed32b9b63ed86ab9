"""The live panel in a real browser: a real ComfyUI server (the host's main.py) with EriDiffusion in
its custom_nodes, the tiny demo workflow loaded into the page and queued there, Debian's
Chromium driven by Playwright. Screenshots go to test-artifacts/."""

import base64
import json
import os
import time

from devkit.browser import ARTIFACTS, inside
from devkit.example_workflows import load_example

TRAINER = 5


def test_panel_shows_progress_samples_and_stops_and_saves_within_its_reserved_size(comfy_server, comfy_page):
    url, base = comfy_server
    page = comfy_page.page
    workflow = load_example("tiny_demo_lora.json")
    comfy_page.load(workflow)
    loaded = {"layout": comfy_page.layout(), "sizes": comfy_page.sizes()}
    # bring the trainer into view, as a user would before watching it
    comfy_page.show_node(TRAINER)
    page.evaluate(
        """() => { window.eridiffusionEvents = [];
                   window.comfyAPI.api.api.addEventListener("eridiffusion.progress",
                       () => window.eridiffusionEvents.push(performance.now())); }"""
    )
    page.wait_for_function(f"window.app.graph.getNodeById({TRAINER})?.eridiffusionPanel !== undefined")
    panel = f"window.app.graph.getNodeById({TRAINER}).eridiffusionPanel"
    page.evaluate("() => window.app.queuePrompt(0)")
    page.wait_for_function(f"{panel}.losses.length >= 10", timeout=300_000)
    first_text = page.inner_text(".eridiffusion-stats")
    page.wait_for_function(f"{panel}.samples.children.length >= 1", timeout=300_000)
    comfy_page.screenshot("live_panel_training.png")
    training = {"layout": comfy_page.layout(), "sizes": comfy_page.sizes()}
    screen = comfy_page.panel_on_screen(TRAINER)
    later_text = page.inner_text(".eridiffusion-stats")
    times = page.evaluate("window.eridiffusionEvents")
    page.click("text=Stop & save")
    lora = base / "models" / "loras" / "eridiffusion" / "sks_dog.safetensors"
    image = base / "output" / "eridiffusion" / "sks_dog_00001_.png"  # the Test group's image: the graph ran on
    deadline = time.time() + 300
    while not (lora.exists() and image.exists()) and time.time() < deadline:
        time.sleep(1)
    page.wait_for_function(f"{panel}.summary.textContent.includes('evaluation loss')", timeout=30_000)
    stop_enabled = page.evaluate(f"!{panel}.stopButton.disabled")
    comfy_page.screenshot("live_panel_stopped.png")
    finished = {"layout": comfy_page.layout(), "sizes": comfy_page.sizes()}
    points = page.evaluate(f"{panel}.losses.length")
    # reopen the workflow the run saved: the chart comes back from the run's loss history
    with open(base / "output" / "sks_dog" / "workflow.json") as f:
        saved = json.load(f)
    comfy_page.load(saved)
    page.wait_for_function(f"{panel}.losses.length > 0")
    restored = page.evaluate(f"{panel}.losses.length")
    restored_samples = page.evaluate(f"{panel}.samples.children.length")
    comfy_page.screenshot("live_panel_reopened.png")
    reopened = {"layout": comfy_page.layout(), "sizes": comfy_page.sizes()}
    rate = (len(times) - 1) / ((times[-1] - times[0]) / 1000) if len(times) > 1 else 0.0
    with open(os.path.join(ARTIFACTS, "browser_console.txt"), "w") as f:
        f.write(f"events received: {len(times)}, {rate:.2f} per second\n" + "\n".join(comfy_page.errors) + "\n")
    assert lora.exists() and image.exists(), open(base / "server.log").read()[-3000:]
    with open(base / "output" / "sks_dog" / "summary.json") as f:
        summary = json.load(f)
    assert summary["steps"] < summary["planned_steps"] == 200
    assert "ETA" in first_text and first_text != later_text and not stop_enabled
    assert points >= 10 and restored == summary["steps"] and restored_samples >= 2
    assert 0 < rate <= 4.5  # throttled to four a second
    # the panel, samples and reports fit the room reserved on first load: no node grew or overlaps
    assert loaded["layout"]["problems"] == []
    for moment, state in {"training": training, "finished": finished, "reopened": reopened}.items():
        assert state["layout"] == loaded["layout"], moment
        grown = {i: (loaded["sizes"][i], size) for i, size in state["sizes"].items() if size != loaded["sizes"][i]}
        assert grown == {}, moment
    assert inside(screen["panel"], screen["node"]), screen
    assert screen["panel"][3] > 250  # the panel is shown, not hidden or collapsed
    assert comfy_page.our_errors() == []


def test_panel_draws_the_validation_loss_beside_the_training_loss(comfy_page):
    """Two series in the chart, with a legend: an event carrying validation points (as the trainer
    sends them) is drawn in the validation color beside the training curve."""
    comfy_page.load(load_example("tiny_demo_lora.json"))
    page = comfy_page.page
    page.wait_for_function(f"window.app.graph.getNodeById({TRAINER})?.eridiffusionPanel !== undefined")
    counts = page.evaluate(
        f"""() => {{
            const panel = window.app.graph.getNodeById({TRAINER}).eridiffusionPanel;
            const event = (step, losses, validation) => ({{prompt_id: "p", run: "r", step, total: 40, losses,
                validation, seconds_per_step: 0.1, eta_seconds: 1, lr: 1e-4, peak_vram_gib: null, samples: []}});
            panel.update(event(10, Array.from({{length: 10}}, (_, i) => 1 - i / 20), [[10, 0.9]]));
            panel.update(event(20, Array.from({{length: 10}}, (_, i) => 0.5 - i / 40), [[20, 0.8]]));
            const pixels = panel.canvas.getContext("2d").getImageData(0, 0, panel.canvas.width,
                                                                      panel.canvas.height).data;
            const count = ([r, g, b]) => {{
                let n = 0;
                for (let i = 0; i < pixels.length; i += 4)
                    if (pixels[i] === r && pixels[i + 1] === g && pixels[i + 2] === b && pixels[i + 3] === 255) n++;
                return n;
            }};
            return {{validation: panel.validation.length, training: count([80, 140, 255]),
                    validationPixels: count([255, 150, 40]), png: panel.canvas.toDataURL("image/png")}};
        }}"""
    )
    os.makedirs(ARTIFACTS, exist_ok=True)
    with open(os.path.join(ARTIFACTS, "live_panel_validation_chart.png"), "wb") as f:
        f.write(base64.b64decode(counts.pop("png").split(",", 1)[1]))
    assert counts["validation"] == 2
    assert counts["training"] > 20 and counts["validationPixels"] > 20, counts
