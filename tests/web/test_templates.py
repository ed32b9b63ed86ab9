"""The template browser's listing, as the real ComfyUI server gives it to the page: every example
workflow under EriDiffusion's name, each with its thumbnail (devkit/thumbnails.py: a map of the
example and its one-line description) served beside it and drawn from the example as it is now."""

import io
import json
import os
import urllib.request

from PIL import Image, ImageChops

from devkit.example_workflows import FOLDER
from devkit.thumbnails import DESCRIPTIONS, SIZE, draw, examples


def test_every_example_has_a_description_and_a_thumbnail_of_its_current_layout():
    names = examples()
    assert len(names) >= 12
    assert sorted(DESCRIPTIONS) == names  # (a new example gets its line in devkit/thumbnails.py)
    thumbnails = sorted(name[:-4] for name in os.listdir(FOLDER) if name.endswith(".jpg"))
    assert thumbnails == names  # (then `python -m devkit.thumbnails` writes the jpgs)
    for name in names:
        with open(os.path.join(FOLDER, f"{name}.json")) as f:
            now = draw(json.load(f), DESCRIPTIONS[name])
        with Image.open(os.path.join(FOLDER, f"{name}.jpg")) as committed:
            saved = committed.convert("RGB")
        # compared at a quarter of the size, where the jpg's own error is at most 5 of 255 (2026-11-30)
        # and a node moved by 60 px, or one link fewer, differs by 17 or more somewhere
        apart = ImageChops.difference(now.reduce(4), saved.reduce(4)).convert("L").getextrema()[1]
        assert apart <= 12, f"example_workflows/{name}.jpg is out of date: run python -m devkit.thumbnails"


def test_the_server_lists_every_example_and_serves_its_thumbnail(comfy_server):
    url, _ = comfy_server
    with urllib.request.urlopen(f"{url}/api/workflow_templates", timeout=30) as response:
        listed = json.load(response)
    assert sorted(listed["EriDiffusion"]) == examples()
    for name in examples():
        with urllib.request.urlopen(f"{url}/api/workflow_templates/EriDiffusion/{name}.jpg", timeout=30) as response:
            assert response.headers["Content-Type"] == "image/jpeg"
            image = Image.open(io.BytesIO(response.read()))
        assert (image.format, image.size) == ("JPEG", SIZE), name
