"""The template browser's thumbnails: example_workflows/<name>.jpg beside each <name>.json, as ComfyUI
serves a custom node's templates (/api/workflow_templates gives the page a name and an optional
same-named jpg, nothing else). Each is a map of the example drawn from its file: its groups in their
colours and titles, its nodes and links where the canvas puts them, and along the bottom the one-line
description of DESCRIPTIONS (the listing has no other place for one). After the examples change:

    .venv/bin/python -m devkit.thumbnails
"""

import json
import os

from PIL import Image, ImageColor, ImageDraw, ImageFont

from devkit.example_workflows import FOLDER

SIZE = (512, 384)
QUALITY = 90  # JPEG's own error stays well under the template test's 2.0 (85 gave 2.01 on a busy map)
CAPTION = 40  # px along the bottom for the description
BACKGROUND, NODE, NODE_EDGE, LINK, TEXT = "#202020", "#353535", "#5a5a5a", "#8a8a8a", "#e8e8e8"
DESCRIPTIONS = {
    "ace_step15_lora": "ACE-Step 1.5: a music LoRA from songs and their lyrics",
    "flux2_klein_lora": "Flux.2-klein: an image LoRA",
    "flux_dev_lora": "Flux.1-dev: an image LoRA, block swap on a 24 GB card",
    "lora_tools": "The LoRA toolbox: inspect, convert, resize, merge",
    "ltx2_sound_lora": "LTX-2: a video LoRA with its sound",
    "qwen_image_edit_lora": "Qwen-Image-Edit: an edit LoRA from before/after pairs",
    "sd15_lora": "SD1.5: an image LoRA",
    "sdxl_finetune": "SDXL: a full fine-tune, saved as a checkpoint",
    "sdxl_lora": "SDXL: an image LoRA",
    "tiny_demo_lora": "The tiny demo: a LoRA trained in a minute on the CPU",
    "wan22_i2v_experts_lora": "Wan 2.2 14B image-to-video: both experts in one run",
    "wan22_t2v_experts_lora": "Wan 2.2 14B text-to-video: both experts in one run",
    "z_image_lora": "Z-Image: an image LoRA",
}


def examples():
    """The example names (without .json) in example_workflows/."""
    return sorted(name[:-5] for name in os.listdir(FOLDER) if name.endswith(".json"))


def draw(workflow, description):
    """The thumbnail of a UI-format `workflow` (an RGB image of SIZE)."""
    boxes = [g["bounding"] for g in workflow["groups"]] + [[*n["pos"], *n["size"]] for n in workflow["nodes"]]
    x0, y0 = min(b[0] for b in boxes), min(b[1] for b in boxes)
    x1, y1 = max(b[0] + b[2] for b in boxes), max(b[1] + b[3] for b in boxes)
    width, height = SIZE[0] - 16, SIZE[1] - CAPTION - 16
    scale = min(width / (x1 - x0), height / (y1 - y0))
    left, top = 8 + (width - scale * (x1 - x0)) / 2, 8 + (height - scale * (y1 - y0)) / 2

    def box(x, y, w, h):
        x, y = left + (x - x0) * scale, top + (y - y0) * scale
        return [x, y, x + w * scale, y + h * scale]

    image = Image.new("RGB", SIZE, BACKGROUND)
    canvas = ImageDraw.Draw(image)
    label, title, caption = (ImageFont.load_default(size=size) for size in (9, 12, 17))
    for group in workflow["groups"]:
        canvas.rectangle(box(*group["bounding"]), fill=_dim(group["color"]), outline=group["color"], width=2)
    nodes = {n["id"]: (box(*n["pos"], *n["size"]), _name(n)) for n in workflow["nodes"]}
    for link in workflow["links"]:
        (source, _), (target, _) = nodes[link[1]], nodes[link[3]]
        canvas.line([(source[2], (source[1] + source[3]) / 2), (target[0], (target[1] + target[3]) / 2)], LINK)
    for rect, name in nodes.values():
        canvas.rectangle(rect, fill=NODE, outline=NODE_EDGE)
        while name and canvas.textlength(name, font=label) > rect[2] - rect[0] - 4:
            name = name[:-1]
        canvas.text((rect[0] + 2, rect[1] + 2), name, fill=TEXT, font=label)
    for group in workflow["groups"]:  # (over the nodes: the four steps read first)
        rect = box(*group["bounding"])
        corner = canvas.textbbox((rect[0] + 4, rect[1] + 2), group["title"], font=title)
        canvas.rectangle([corner[0] - 3, corner[1] - 2, corner[2] + 3, corner[3] + 2], fill=group["color"])
        canvas.text((rect[0] + 4, rect[1] + 2), group["title"], fill=TEXT, font=title)
    canvas.text((SIZE[0] / 2, SIZE[1] - CAPTION / 2), description, fill=TEXT, font=caption, anchor="mm")
    return image


def _name(node):
    """What the canvas titles a node: its title, else its type without our prefix."""
    return node.get("title") or node["type"].removeprefix("EriDiffusion_")


def _dim(color):
    """The group's colour at a third of its brightness, for its area."""
    return tuple(part // 3 for part in ImageColor.getrgb(color))


def write(name):
    """Draw example `name`'s thumbnail to example_workflows/<name>.jpg (atomically)."""
    with open(os.path.join(FOLDER, f"{name}.json")) as f:
        image = draw(json.load(f), DESCRIPTIONS[name])
    path = os.path.join(FOLDER, f"{name}.jpg")
    image.save(f"{path}.partial", "JPEG", quality=QUALITY, optimize=True)
    os.replace(f"{path}.partial", path)


def main():
    for name in examples():
        write(name)
        print(f"example_workflows/{name}.jpg")


if __name__ == "__main__":
    main()
