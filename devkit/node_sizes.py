"""The room a node takes in ComfyUI's page, in both of its node renderers: the classic LiteGraph
canvas and Nodes 2.0 (Vue nodes, `Comfy.VueNodes.Enabled`). The example workflows give every node the
larger of the two, so that one file lays out without overlaps whichever renderer the user has on:
the classic canvas keeps a size larger than it needs, and Nodes 2.0 draws a node at its saved size
or its content's, whichever is larger.

The figures were measured in the page (frontend 1.32 and 1.45 for the classic canvas, 1.45 for Nodes
2.0); the browser test checks, in each renderer, that the page keeps every size written here (no
node grown by its content) and that nothing overlaps."""

import json
import os
import re
import textwrap

from devkit.paths import ROOT

NOTE = "Note"  # the page's own note node: text only, never sent to the server
WIDTH = 360  # every column: wider than any node's content in either renderer (about 280 at most)

# Classic canvas: a node's height is max(sockets, outputs) slot rows plus each widget's height + 4,
# + 8, + 6; its title bar (TITLE) sits above `pos`.
TITLE, SLOT, WIDGET, TEXT_BOX = 30, 20, 20, 50  # TEXT_BOX: a multiline text's least height
IMAGE_PREVIEW = 220  # the image a preview node shows after a run
SHOWS_IMAGES = {"PreviewImage", "SaveImage", "SaveVideo", "EriDiffusion_LossGraph"}  # (SaveVideo: its clip)
# A saved audio's player: Nodes 2.0 gives SaveAudioMP3 a row of 16 for it at load (measured in frontend
# 1.45), the classic canvas a widget.
PLAYS_AUDIO = {"SaveAudioMP3"}
TEXT_ROOM = 40  # more than the least height for the prompts, so a few lines show
NOTE_CHARACTERS, NOTE_LINE = 46, 15  # a classic Note's characters per line, and line height

# Nodes 2.0: a node is a DOM box of border (2), header (36), padding (4 above, 12 below), the slot
# rows (inputs and outputs side by side, 24 each), then one row per widget with a 4 gap, and a
# footer: a custom node's source badge (20 + gap), a core loader's model button (28). Its size[1] is
# the box's height less the title bar LiteGraph counts above `pos`.
VUE_FRAME = 2 + 36 + 4 + 12 - TITLE
VUE_SLOT, VUE_GAP, VUE_FOOTER = 24, 4, 28
VUE_WIDGETS = {"number": 28, "combo": 28, "text": 32, "toggle": 24, "text box": 64, "audio": 16}
# An image combo with an upload button (LoadImage): the button and the picked image's preview below the
# combo; Nodes 2.0 gives them 232 (measured in frontend 1.45, with no image picked yet), the classic
# canvas a button widget and the preview.
VUE_IMAGE_UPLOAD = 232
# A Note's text: 12 px type on 16 px lines, about 40 characters to a line (36 counted, for wider
# letters), 20 + 8 padding around it.
VUE_NOTE_CHARACTERS, VUE_NOTE_LINE, VUE_NOTE_PADDING = 36, 16, 28


def script_constant(name):
    """The value of `const NAME = ...;` (a number, or a Set of strings) in web/eridiffusion.js: what the
    page reserves room for is defined there once."""
    with open(os.path.join(ROOT, "web", "eridiffusion.js")) as f:
        value = re.search(rf"^const {name} = (.*);$", f.read(), re.M).group(1)
    if value.startswith("new Set("):
        return set(json.loads(value[len("new Set(") : -1]))
    return json.loads(value)


def node_size(node_type, widget_values=None):
    """[width, height] that a node of `node_type` needs in either renderer, with the room for what it
    shows after a run; a Note's from its text (`widget_values["text"]`)."""
    if node_type == NOTE:
        text = (widget_values or {})["text"]
        return [WIDTH, max(_classic_note(text), _vue_note(text))]
    parts = _parts(node_type)
    return [WIDTH, max(_classic_height(parts), _vue_height(parts))]


def _parts(node_type):
    """What a node's height is made of: {"sockets", "outputs", "widgets": [kind, ...]}."""
    import nodes as comfy_nodes

    from devkit.workflow import has_control_widget, is_widget

    cls = comfy_nodes.NODE_CLASS_MAPPINGS[node_type]
    definition = cls.INPUT_TYPES()
    specs = list(definition.get("required", {}).items()) + list(definition.get("optional", {}).items())
    sockets, widgets = 0, []
    for name, spec in specs:
        if not is_widget(spec):
            sockets += 1
        elif spec[0] == "STRING":
            widgets.append("text box" if len(spec) > 1 and spec[1].get("multiline") else "text")
        else:
            kind = spec[0] if isinstance(spec[0], str) else "COMBO"  # (a list of choices: a combo)
            widgets.append({"INT": "number", "FLOAT": "number", "BOOLEAN": "toggle"}.get(kind, "combo"))
            if len(spec) > 1 and spec[1].get("image_upload"):
                widgets.append("image upload")
            if has_control_widget(name, spec):
                widgets.append("control")  # classic: a widget of its own; Nodes 2.0: part of the seed's
    if node_type == "EriDiffusion_LoRATrainer":
        widgets.append("panel")
    if node_type in script_constant("REPORTING"):
        widgets.append("text box")  # the box of the text it reports after a run
    if node_type in SHOWS_IMAGES:
        widgets.append("image")
    if node_type in PLAYS_AUDIO:
        widgets.append("audio")
    return {"sockets": sockets, "outputs": len(cls.RETURN_TYPES), "widgets": widgets}


def _classic_height(parts):
    heights = {
        "panel": script_constant("PANEL_HEIGHT"),
        "image": IMAGE_PREVIEW,
        "text box": TEXT_BOX,
        "image upload": WIDGET + 4 + IMAGE_PREVIEW,
    }
    widgets = [heights.get(kind, WIDGET) for kind in parts["widgets"]]
    room = TEXT_ROOM * sum(kind == "text box" for kind in parts["widgets"])
    height = max(parts["sockets"], parts["outputs"], 1) * SLOT
    if widgets:
        height += sum(h + 4 for h in widgets) + 8
    return height + 6 + room


def _vue_height(parts):
    heights = {
        **VUE_WIDGETS,
        "panel": script_constant("PANEL_HEIGHT"),
        "image": IMAGE_PREVIEW,
        "image upload": VUE_IMAGE_UPLOAD,
    }
    widgets = [heights[kind] + VUE_GAP for kind in parts["widgets"] if kind != "control"]
    return VUE_FRAME + max(parts["sockets"], parts["outputs"]) * VUE_SLOT + sum(widgets) + VUE_GAP + VUE_FOOTER


def _classic_note(text):
    lines = sum(1 + len(paragraph) // NOTE_CHARACTERS for paragraph in text.split("\n"))
    return SLOT + 4 + 8 + 6 + 12 + NOTE_LINE * lines


def _vue_note(text):
    lines = sum(max(1, len(textwrap.wrap(p, VUE_NOTE_CHARACTERS))) for p in text.split("\n"))
    return VUE_FRAME + VUE_GAP + VUE_NOTE_PADDING + VUE_NOTE_LINE * (lines + 1)
