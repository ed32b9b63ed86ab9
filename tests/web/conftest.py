"""The browser tests' setup: one real ComfyUI server (the host's main.py) with EriDiffusion in its
custom_nodes and the dog photos in its input/, shared by the whole browser suite, and a headless
Debian Chromium driven by Playwright for each test module, the page drawn by each of the host's node
renderers in turn (the `renderer` fixture). Screenshots go to test-artifacts/."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from devkit.browser import ARTIFACTS, CHROMIUM, ComfyPage, renderers
from devkit.paths import ROOT
from eridiffusion import host


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def comfy_server(tmp_path_factory, datasets_dir):
    base = tmp_path_factory.mktemp("comfy_base")
    os.makedirs(base / "custom_nodes")
    os.symlink(ROOT, base / "custom_nodes" / "EriDiffusion")
    shutil.copytree(os.path.join(datasets_dir, "dreambooth_dog"), base / "input" / "dreambooth_dog")
    # a returning user: no first-run template browser over the canvas; no minimap over the screenshots
    os.makedirs(base / "user" / "default")
    with open(base / "user" / "default" / "comfy.settings.json", "w") as f:
        json.dump({"Comfy.TutorialCompleted": True, "Comfy.Minimap.Visible": False}, f)
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


@pytest.fixture(scope="module")
def browser():
    # per module: Playwright's sync API runs an event loop in this thread while it is open, which
    # would stop the asyncio.run() of any test after it in the session
    from playwright.sync_api import sync_playwright

    os.makedirs(ARTIFACTS, exist_ok=True)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
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
        yield chromium
        chromium.close()


@pytest.fixture(params=renderers())
def renderer(request):
    """Each node renderer of the host's page: the classic canvas, and Nodes 2.0 where it has it."""
    return request.param


@pytest.fixture
def comfy_page(browser, comfy_server, renderer):
    url, _ = comfy_server
    page = ComfyPage(browser, url, renderer=renderer)
    yield page
    page.close()
