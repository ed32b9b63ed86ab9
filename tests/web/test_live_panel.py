"""The live panel in a real browser: a real ComfyUI server (the host's main.py) with EriDiffusion in
its custom_nodes, the tiny demo workflow loaded into the page and queued there, Debian's
Chromium driven by Playwright. Screenshots go to test-artifacts/."""

import base64
import json
import os
import time
import urllib.request

import pytest

from devkit.browser import ARTIFACTS, ComfyPage, inside, renderers
from devkit.example_workflows import load_example

TRAINER = 5


def run_outputs(url, run):
    """{node id: what it showed} of run `run`'s prompt, from the server's history."""
    with urllib.request.urlopen(f"{url}/history", timeout=10) as response:
        history = json.load(response)
    return next(entry["outputs"] for entry in history.values() if run in json.dumps(entry["outputs"].get("6", {})))


# A finished run's outputs handed to the page as the server sends them: the trainer's last progress
# event, then each node's "executed" message.
SHOW_OUTPUTS = """([trainer, outputs, event]) => {
  window.app.graph.getNodeById(trainer).eridiffusionPanel.update(event);
  const api = window.comfyAPI.api.api;
  for (const [id, output] of Object.entries(outputs)) {
    if (!window.app.graph.getNodeById(Number(id))) continue;
    api.dispatchEvent(new CustomEvent("executed", {detail: {node: id, display_node: id, output,
                                                            prompt_id: event.prompt_id}}));
  }
}"""


def shown_with_outputs(comfy_page, example, outputs, event):
    """(layout and sizes of example `example` as loaded, the same once it shows `outputs`)."""
    comfy_page.load(load_example(example))
    before = {"layout": comfy_page.layout(), "sizes": comfy_page.sizes()}
    comfy_page.page.evaluate(SHOW_OUTPUTS, [TRAINER, outputs, event])
    comfy_page.settle()
    comfy_page.fit_view()
    comfy_page.screenshot(f"finished_{example[:-5]}_{comfy_page.renderer}.png")
    return before, {"layout": comfy_page.layout(), "sizes": comfy_page.sizes()}


def test_panel_shows_progress_samples_and_stops_and_saves_within_its_reserved_size(comfy_server, comfy_page, renderer):
    url, base = comfy_server
    page = comfy_page.page
    workflow = load_example("tiny_demo_lora.json")
    comfy_page.load(workflow)
    run = f"sks_dog_{renderer}"  # the run's names: one run per renderer on the one server
    page.evaluate(
        """(run) => {
          const set = (type, name, value) => {
            window.app.graph._nodes.find((n) => n.type === type).widgets.find((w) => w.name === name).value = value;
          };
          set("EriDiffusion_LoRATrainer", "run_name", run);
          set("EriDiffusion_SaveLoRA", "filename_prefix", `eridiffusion/${run}`);
          set("SaveImage", "filename_prefix", `eridiffusion/${run}`);
          // trained at 64 px, and the samples and the Test group's image drawn in 2 sampler steps, not the
          // example's 256 px and 8 steps: the same events, panel and images (still 256 x 256), in about
          // half the time (the run took ~100 s of each renderer's test)
          set("EriDiffusion_CacheLatents", "resolution", 64);
          set("EriDiffusion_SampleDuringTraining", "steps", 2);
          set("KSampler", "steps", 2);
        }""",
        run,
    )
    loaded = {"layout": comfy_page.layout(), "sizes": comfy_page.sizes()}
    # bring the trainer into view, as a user would before watching it
    comfy_page.show_node(TRAINER)
    page.evaluate(
        """() => { window.eridiffusionEvents = [];
                   window.comfyAPI.api.api.addEventListener("eridiffusion.progress", ({ detail }) => {
                       window.eridiffusionEvents.push(performance.now()); window.eridiffusionLast = detail; }); }"""
    )
    page.wait_for_function(f"window.app.graph.getNodeById({TRAINER})?.eridiffusionPanel !== undefined")
    panel = f"window.app.graph.getNodeById({TRAINER}).eridiffusionPanel"
    page.evaluate("() => window.app.queuePrompt(0)")
    page.wait_for_function(f"{panel}.losses.length >= 10", timeout=300_000)
    first_text = page.inner_text(".eridiffusion-stats")
    page.wait_for_function(f"{panel}.samples.children.length >= 1", timeout=300_000)
    comfy_page.screenshot(f"live_panel_training_{renderer}.png")
    training = {"layout": comfy_page.layout(), "sizes": comfy_page.sizes()}
    screen = comfy_page.panel_on_screen(TRAINER)
    later_text = page.inner_text(".eridiffusion-stats")
    times = page.evaluate("window.eridiffusionEvents")
    page.click("text=Stop & save")
    lora = base / "models" / "loras" / "eridiffusion" / f"{run}.safetensors"
    image = base / "output" / "eridiffusion" / f"{run}_00001_.png"  # the Test group's image: the graph ran on
    deadline = time.time() + 300
    while not (lora.exists() and image.exists()) and time.time() < deadline:
        time.sleep(1)
    page.wait_for_function(f"{panel}.summary.textContent.includes('evaluation loss')", timeout=30_000)
    stop_enabled = page.evaluate(f"!{panel}.stopButton.disabled")
    comfy_page.screenshot(f"live_panel_stopped_{renderer}.png")
    finished = {"layout": comfy_page.layout(), "sizes": comfy_page.sizes()}
    points = page.evaluate(f"{panel}.losses.length")
    # the other examples holding this run's outputs, as the page shows them after a run of theirs
    outputs, event = run_outputs(url, run), page.evaluate("window.eridiffusionLast")
    shown = {
        example: shown_with_outputs(comfy_page, example, outputs, event)
        for example in ("sd15_lora.json", "sdxl_lora.json")
    }
    # reopen the workflow the run saved: the chart comes back from the run's loss history
    with open(base / "output" / run / "workflow.json") as f:
        saved = json.load(f)
    comfy_page.load(saved)
    page.wait_for_function(f"{panel}.losses.length > 0")
    restored = page.evaluate(f"{panel}.losses.length")
    restored_samples = page.evaluate(f"{panel}.samples.children.length")
    comfy_page.screenshot(f"live_panel_reopened_{renderer}.png")
    reopened = {"layout": comfy_page.layout(), "sizes": comfy_page.sizes()}
    rate = (len(times) - 1) / ((times[-1] - times[0]) / 1000) if len(times) > 1 else 0.0
    with open(os.path.join(ARTIFACTS, f"browser_console_{renderer}.txt"), "w") as f:
        f.write(f"events received: {len(times)}, {rate:.2f} per second\n" + "\n".join(comfy_page.errors) + "\n")
    assert lora.exists() and image.exists(), open(base / "server.log").read()[-3000:]
    with open(base / "output" / run / "summary.json") as f:
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
    for example, (before, after) in shown.items():
        assert before["layout"]["problems"] == [] and after == before, example
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
    with open(os.path.join(ARTIFACTS, f"live_panel_validation_chart_{comfy_page.renderer}.png"), "wb") as f:
        f.write(base64.b64decode(counts.pop("png").split(",", 1)[1]))
    assert counts["validation"] == 2
    assert counts["training"] > 20 and counts["validationPixels"] > 20, counts


# One progress event as the trainer sends it.
PROGRESS = """(id) => window.app.graph.getNodeById(id).eridiffusionPanel.update({prompt_id: "switch", run: "r",
    step: 10, total: 40, losses: Array.from({length: 10}, (_, i) => 1 - i / 20), validation: [],
    seconds_per_step: 0.1, eta_seconds: 3, lr: 1e-4, peak_vram_gib: null, samples: []})"""


@pytest.mark.skipif("nodes2" not in renderers(), reason="the host's frontend predates Nodes 2.0")
def test_switching_the_renderer_with_the_workflow_open_keeps_the_layout_and_a_working_panel(browser, comfy_server):
    url, _ = comfy_server
    comfy_page = ComfyPage(browser, url, renderer="classic")
    try:
        comfy_page.load(load_example("tiny_demo_lora.json"))
        seen = {}
        for renderer in ("nodes2", "classic"):
            comfy_page.switch_renderer(renderer)
            comfy_page.show_node(TRAINER)
            comfy_page.page.evaluate(PROGRESS, TRAINER)
            comfy_page.screenshot(f"live_panel_switched_to_{renderer}.png")
            seen[renderer] = {
                "problems": comfy_page.layout()["problems"],
                "screen": comfy_page.panel_on_screen(TRAINER),
                "text": comfy_page.page.locator(".eridiffusion-stats").inner_text(),
            }
        errors = comfy_page.our_errors()
    finally:
        comfy_page.close()
    for renderer, state in seen.items():
        assert state["problems"] == [], renderer
        assert inside(state["screen"]["panel"], state["screen"]["node"]) and state["screen"]["panel"][3] > 250, state
        assert "step 10 / 40" in state["text"], renderer
    assert errors == []
