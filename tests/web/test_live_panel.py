"""The live panel in a real browser: a real ComfyUI server (the host's main.py) with EriDiffusion in
its custom_nodes, the tiny demo workflow loaded into the page and queued there, Debian's
Chromium driven by Playwright. Screenshots go to test-artifacts/."""

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from eridiffusion import host
from tests.support.example_workflows import load_example
from tests.support.paths import ROOT

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = os.path.join(ROOT, "test-artifacts")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def comfy_server(tmp_path_factory, datasets_dir):
    base = tmp_path_factory.mktemp("comfy_base")
    os.makedirs(base / "custom_nodes")
    os.symlink(ROOT, base / "custom_nodes" / "EriDiffusion")
    shutil.copytree(os.path.join(datasets_dir, "dreambooth_dog"), base / "input" / "dreambooth_dog")
    # a returning user: no first-run template browser over the canvas
    os.makedirs(base / "user" / "default")
    with open(base / "user" / "default" / "comfy.settings.json", "w") as f:
        json.dump({"Comfy.TutorialCompleted": True}, f)
    port = free_port()
    log = open(base / "server.log", "w")
    server = subprocess.Popen(
        [
            sys.executable,
            "main.py",
            "--cpu",
            "--listen",
            "127.0.0.1",
            "--port",
            str(port),
            "--base-directory",
            str(base),
            "--disable-auto-launch",
        ],
        cwd=host.comfyui_path(),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 180
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url + "/system_stats", timeout=2)
            break
        except OSError:
            assert server.poll() is None, open(base / "server.log").read()[-3000:]
            time.sleep(1)
    else:
        server.kill()
        pytest.fail("ComfyUI did not start:\n" + open(base / "server.log").read()[-3000:])
    yield url, base
    server.terminate()
    server.wait(timeout=30)
    log.close()


def ours(message, server_url):
    """Errors EriDiffusion is answerable for: from its script, its routes or its nodes. The offline
    frontend's own (its registry lookups at api.comfy.org, which this machine cannot reach, and
    404s of optional userdata files) are kept in the artifacts, not asserted on."""
    offline_lookup = "ERR_NAME_NOT_RESOLVED" in message and server_url not in message
    return "eridiffusion" in message.lower() and not offline_lookup


def test_panel_shows_progress_samples_and_stops_and_saves(comfy_server):
    from playwright.sync_api import sync_playwright

    url, base = comfy_server
    os.makedirs(ARTIFACTS, exist_ok=True)
    workflow = load_example("tiny_demo_lora.json")
    errors = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        page = browser.new_page(viewport={"width": 1600, "height": 2200})
        page.on(
            "console", lambda m: errors.append(f"{m.text} {m.location.get('url', '')}") if m.type == "error" else None
        )
        page.on("pageerror", lambda e: errors.append(f"{e} {e.stack}"))
        page.goto(url)
        page.wait_for_function("window.app && window.app.graph", timeout=120_000)
        page.evaluate("workflow => window.app.loadGraphData(workflow)", workflow)
        # bring the trainer into view, as a user would before watching it
        page.evaluate("""() => { const c = window.app.canvas; c.ds.scale = 1;
                                 c.centerOnNode(window.app.graph.getNodeById(5)); c.setDirty(true, true);
                                 window.eridiffusionEvents = [];
                                 window.comfyAPI.api.api.addEventListener("eridiffusion.progress",
                                     () => window.eridiffusionEvents.push(performance.now())); }""")
        page.wait_for_function("window.app.graph.getNodeById(5)?.eridiffusionPanel !== undefined")
        page.evaluate("() => window.app.queuePrompt(0)")
        page.wait_for_function("window.app.graph.getNodeById(5).eridiffusionPanel.losses.length >= 10", timeout=300_000)
        first_text = page.inner_text(".eridiffusion-stats")
        page.wait_for_function(
            "window.app.graph.getNodeById(5).eridiffusionPanel.samples.children.length >= 1", timeout=300_000
        )
        page.screenshot(path=os.path.join(ARTIFACTS, "live_panel_training.png"))
        later_text = page.inner_text(".eridiffusion-stats")
        times = page.evaluate("window.eridiffusionEvents")
        page.click("text=Stop & save")
        lora = base / "models" / "loras" / "eridiffusion" / "sks_dog.safetensors"
        deadline = time.time() + 300
        while not lora.exists() and time.time() < deadline:
            time.sleep(1)
        page.screenshot(path=os.path.join(ARTIFACTS, "live_panel_stopped.png"))
        points = page.evaluate("window.app.graph.getNodeById(5).eridiffusionPanel.losses.length")
        # reopen the workflow the run saved: the chart comes back from the run's loss history
        with open(base / "output" / "sks_dog" / "workflow.json") as f:
            saved = json.load(f)
        page.evaluate("workflow => window.app.loadGraphData(workflow)", saved)
        page.wait_for_function("window.app.graph.getNodeById(5).eridiffusionPanel.losses.length > 0")
        restored = page.evaluate("window.app.graph.getNodeById(5).eridiffusionPanel.losses.length")
        restored_samples = page.evaluate("window.app.graph.getNodeById(5).eridiffusionPanel.samples.children.length")
        page.screenshot(path=os.path.join(ARTIFACTS, "live_panel_reopened.png"))
        browser.close()
    rate = (len(times) - 1) / ((times[-1] - times[0]) / 1000) if len(times) > 1 else 0.0
    with open(os.path.join(ARTIFACTS, "browser_console.txt"), "w") as f:
        f.write(f"events received: {len(times)}, {rate:.2f} per second\n" + "\n".join(errors) + "\n")
    assert lora.exists(), open(base / "server.log").read()[-3000:]
    with open(base / "output" / "sks_dog" / "summary.json") as f:
        summary = json.load(f)
    assert summary["steps"] < summary["planned_steps"] == 200
    assert "ETA" in first_text and first_text != later_text
    assert points >= 10 and restored == summary["steps"] and restored_samples >= 2
    assert 0 < rate <= 4.5  # throttled to four a second
    assert [e for e in errors if ours(e, url)] == []


def test_panel_draws_the_validation_loss_beside_the_training_loss(comfy_server):
    """Two series in the chart, with a legend: an event carrying validation points (as the trainer
    sends them) is drawn in the validation color beside the training curve."""
    from playwright.sync_api import sync_playwright

    url, _ = comfy_server
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1600, "height": 1200})
        page.goto(url)
        page.wait_for_function("window.app && window.app.graph", timeout=120_000)
        page.evaluate("workflow => window.app.loadGraphData(workflow)", load_example("tiny_demo_lora.json"))
        page.wait_for_function("window.app.graph.getNodeById(5)?.eridiffusionPanel !== undefined")
        counts = page.evaluate(
            """() => {
                const panel = window.app.graph.getNodeById(5).eridiffusionPanel;
                const event = (step, losses, validation) => ({prompt_id: "p", run: "r", step, total: 40, losses,
                    validation, seconds_per_step: 0.1, eta_seconds: 1, lr: 1e-4, peak_vram_gib: null, samples: []});
                panel.update(event(10, Array.from({length: 10}, (_, i) => 1 - i / 20), [[10, 0.9]]));
                panel.update(event(20, Array.from({length: 10}, (_, i) => 0.5 - i / 40), [[20, 0.8]]));
                const pixels = panel.canvas.getContext("2d").getImageData(0, 0, panel.canvas.width,
                                                                          panel.canvas.height).data;
                const count = ([r, g, b]) => {
                    let n = 0;
                    for (let i = 0; i < pixels.length; i += 4)
                        if (pixels[i] === r && pixels[i + 1] === g && pixels[i + 2] === b && pixels[i + 3] === 255) n++;
                    return n;
                };
                return {validation: panel.validation.length, training: count([80, 140, 255]),
                        validationPixels: count([255, 150, 40]), png: panel.canvas.toDataURL("image/png")};
            }"""
        )
        browser.close()
    os.makedirs(ARTIFACTS, exist_ok=True)
    with open(os.path.join(ARTIFACTS, "live_panel_validation_chart.png"), "wb") as f:
        f.write(base64.b64decode(counts.pop("png").split(",", 1)[1]))
    assert counts["validation"] == 2
    assert counts["training"] > 20 and counts["validationPixels"] > 20, counts
