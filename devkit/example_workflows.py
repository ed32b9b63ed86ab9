"""The example workflows in example_workflows/, generated from the host's node definitions so the
widget order always matches the nodes, and laid out on a grid: groups Model, Data, Train and Test,
each with a Note, at the sizes the page gives the nodes. `python -m devkit.example_workflows`
(with the host started) rewrites the files; a test checks that the committed ones are current, the
browser test that the page shows them without overlaps."""

import json
import os
from dataclasses import dataclass, field

from devkit import node_sizes
from devkit.node_sizes import NOTE, TITLE, WIDTH
from devkit.paths import ROOT

FOLDER = os.path.join(ROOT, "example_workflows")


@dataclass
class Node:
    id: int
    type: str
    widgets: dict = field(default_factory=dict)  # input name → value; missing ones take the default
    links: dict = field(default_factory=dict)  # input name → (node id, output slot)
    title: str = ""
    pos: tuple = (0, 0)  # set by the layout
    size: tuple = (0, 0)


@dataclass
class Group:
    """A titled box of node columns, with a Note on top of its first column."""

    title: str
    color: str
    note: str
    columns: list  # [[Node, ...], ...], each column top to bottom
    bounding: tuple = (0, 0, 0, 0)  # set by the layout


NOTE_COLOR, NOTE_BGCOLOR = "#432", "#653"  # the page's yellow, as its Note nodes get
GAP = 30  # between a node and the next one's title bar, and between columns
PAD, GROUP_TITLE = 20, 40  # inside a group: around its nodes, and its title bar (34 in the page)


def node_size(node):
    """[width, height] of `node` in the page, in either renderer (devkit/node_sizes.py)."""
    return node_sizes.node_size(node.type, node.widgets)


def _column_height(column):
    return sum(TITLE + node.size[1] for node in column) + GAP * (len(column) - 1)


def _group_size(group):
    columns = len(group.columns)
    width = 2 * PAD + columns * WIDTH + (columns - 1) * GAP
    return width, GROUP_TITLE + 2 * PAD + max(_column_height(c) for c in group.columns)


def lay_out(group_columns, first_note_id):
    """Place the groups: each entry of `group_columns` is a stack of groups, the stacks left to right,
    each group a grid of node columns with its Note on top of the first. The groups of a stack share
    their width; the last of each stack reaches down to the bottom of the tallest stack. Returns
    (nodes, groups)."""
    for group in (g for stack in group_columns for g in stack):
        group.columns[0].insert(
            0, Node(first_note_id, NOTE, {"text": group.note}, title=f"{group.title}: what to change")
        )
        first_note_id += 1
        for node in (n for column in group.columns for n in column):
            node.size = node_size(node)

    def stack_height(stack):
        return sum(_group_size(g)[1] for g in stack) + GAP * (len(stack) - 1)

    bottom = max(stack_height(stack) for stack in group_columns)
    nodes, groups, x = [], [], 0
    for stack in group_columns:
        width = max(_group_size(g)[0] for g in stack)
        y = 0
        for group in stack:
            height = _group_size(group)[1] + (bottom - stack_height(stack) if group is stack[-1] else 0)
            group.bounding = (x, y, width, height)
            for i, column in enumerate(group.columns):
                node_y = y + GROUP_TITLE + PAD
                for node in column:
                    node.pos = (x + PAD + i * (WIDTH + GAP), node_y + TITLE)
                    node_y += TITLE + node.size[1] + GAP
                    nodes.append(node)
            groups.append(group)
            y += height + GAP
        x += width + GAP
    return nodes, groups


# Group colours: LiteGraph's group palette (pale blue, green, red, blue).
COLORS = {"Model": "#3f789e", "Data": "#8A8", "Train": "#A88", "Test": "#88A"}

DATA_NOTE = (
    "folder: your images inside ComfyUI's input/ folder, each with a caption .txt of the same name "
    "(copy demo/data/dreambooth_dog there to try). trigger_word goes in front of every caption.\n"
    "CacheLatents encodes them once at its resolution and reuses them on the next run."
)
TRAIN_NOTE = (
    "LoRATrainer: change steps, learning_rate and rank first. Its panel shows the loss, the samples "
    "and Stop & save.\n"
    "Short of GPU memory: MemoryOptions (gradient_checkpointing, weights_vram_gib) and an 8-bit "
    "optimizer in OptimizerOptions. AdapterOptions and CheckpointOptions (Add Node > EriDiffusion > "
    "options) hold the rest. SaveLoRA writes models/loras/eridiffusion/."
)
TEST_NOTE = (
    "Draws one image with the trained MODEL: change the prompt to try the LoRA. The saved file also "
    "loads in a stock LoraLoader."
)


def training_graph(
    checkpoint, resolution, prompt, sample_prompts, model_note, loader=None, trainer=None, options=(), sampling=None
):
    """(nodes, groups), laid out, of checkpoint → dataset → cache → trainer (with samples) → KSampler
    test image, SaveLoRA, LossGraph. `loader` replaces the checkpoint loader (same MODEL, CLIP, VAE
    outputs); `trainer` sets training settings (on the trainer or the options node that holds them),
    `options` names options nodes to show even at their defaults, `sampling` overrides widget values
    of the samplers."""
    trainer, sampling = trainer or {}, sampling or {}
    trainer_node = Node(
        5,
        "EriDiffusion_LoRATrainer",
        {"run_name": "sks_dog"},
        {"model": (1, 0), "training_data": (3, 0), "sample_config": (4, 0)},
    )
    options = _place_settings(trainer_node, trainer, options, first_id=15)
    loader = loader or Node(1, "CheckpointLoaderSimple", {"ckpt_name": checkpoint})
    data = [
        Node(2, "EriDiffusion_LoadDataset", {"folder": "dreambooth_dog", "trigger_word": "sks"}),
        Node(
            3,
            "EriDiffusion_CacheLatents",
            {"resolution": resolution},
            {"dataset": (2, 0), "vae": (1, 2), "clip": (1, 1)},
        ),
    ]
    sampler = Node(
        4,
        "EriDiffusion_SampleDuringTraining",
        {"prompts": sample_prompts, "width": resolution, "height": resolution, **sampling},
        {"clip": (1, 1), "vae": (1, 2)},
    )
    results = [
        Node(6, "EriDiffusion_SaveLoRA", {"filename_prefix": "eridiffusion/sks_dog"}, {"lora": (5, 1)}),
        Node(7, "EriDiffusion_LossGraph", {}, {"loss": (5, 2)}),
        Node(8, "PreviewImage", {}, {"images": (5, 3)}, title="Samples during training"),
    ]
    test_inputs = [
        Node(9, "CLIPTextEncode", {"text": prompt}, {"clip": (1, 1)}, title="Positive"),
        Node(10, "CLIPTextEncode", {"text": "blurry, low quality"}, {"clip": (1, 1)}, title="Negative"),
        Node(11, "EmptyLatentImage", {"width": resolution, "height": resolution, "batch_size": 1}),
    ]
    test_outputs = [
        Node(
            12,
            "KSampler",
            {"seed": 42, "steps": sampling.get("steps", 25), "cfg": sampling.get("cfg", 7.0)},
            {"model": (5, 0), "positive": (9, 0), "negative": (10, 0), "latent_image": (11, 0)},
        ),
        Node(13, "VAEDecode", {}, {"samples": (12, 0), "vae": (1, 2)}),
        Node(14, "SaveImage", {"filename_prefix": "eridiffusion/sks_dog"}, {"images": (13, 0)}),
    ]
    groups = [
        [
            Group("Model", COLORS["Model"], model_note, [[loader]]),
            Group("Data", COLORS["Data"], DATA_NOTE, [data]),
        ],
        [Group("Train", COLORS["Train"], TRAIN_NOTE, [[sampler, *options], [trainer_node], results])],
        [Group("Test", COLORS["Test"], TEST_NOTE, [test_inputs, test_outputs])],
    ]
    return lay_out(groups, first_note_id=15 + len(options))


def _place_settings(trainer_node, settings, shown, first_id):
    """Each of `settings` on the trainer (its own widget) or on an options node linked to it, and
    the options nodes of `shown` even without settings; the options nodes made, in the order of
    trainer_setting_nodes()."""
    from devkit.workflow import trainer_setting_nodes, widget_defaults

    holders = {holder: {} for holder in shown}
    for name, value in settings.items():
        holder = next(t for t in trainer_setting_nodes() if name in widget_defaults(t))
        if trainer_setting_nodes()[holder]:
            holders.setdefault(holder, {})[name] = value
        else:
            trainer_node.widgets[name] = value
    options = []
    for holder, socket in trainer_setting_nodes().items():
        if holder in holders:
            options.append(Node(first_id + len(options), holder, holders[holder]))
            trainer_node.links[socket] = (options[-1].id, 0)
    return options


SD_MODEL_NOTE = (
    "Load the checkpoint to train on ({}; pick yours). Its MODEL is trained; its CLIP and VAE encode "
    "the dataset and draw the samples."
)
EXAMPLES = {
    "sdxl_lora.json": lambda: training_graph(
        "sd_xl_base_1.0.safetensors",
        1024,
        "a photo of sks dog wearing a red scarf, in the snow",
        "a photo of sks dog\na photo of sks dog on the beach",
        SD_MODEL_NOTE.format("SDXL base 1.0 here"),
        options=("EriDiffusion_OptimizerOptions", "EriDiffusion_MemoryOptions"),
    ),
    "sd15_lora.json": lambda: training_graph(
        "v1-5-pruned-emaonly.safetensors",
        512,
        "a photo of sks dog wearing a red scarf, in the snow",
        "a photo of sks dog\na photo of sks dog on the beach",
        SD_MODEL_NOTE.format("SD 1.5 here"),
        options=("EriDiffusion_OptimizerOptions", "EriDiffusion_MemoryOptions"),
    ),
    # Runs anywhere in about a minute on a CPU: a tiny random-weight SDXL (it draws noise), the
    # settings of the README's demo.
    "tiny_demo_lora.json": lambda: training_graph(
        None,
        256,
        "a photo of sks dog wearing a red scarf, in the snow",
        "a photo of sks dog\na photo of sks dog on the beach",
        "A tiny random-weight SDXL, so that the graph runs in about a minute on a CPU (it draws noise). "
        "For a real run, put a Load Checkpoint node here.",
        loader=Node(1, "EriDiffusion_TinyDemoModel", {"architecture": "sdxl"}),
        trainer={
            "steps": 200,
            "learning_rate": 3e-3,
            "dtype": "fp32",
            "targets": "all-linear",
            "rank": 8,
            "alpha": 8.0,
            "gradient_checkpointing": False,
        },
        sampling={"steps": 8, "cfg": 4.0, "every": 40},
    ),
}


TOOLS_MODEL_NOTE = (
    "Load the checkpoint the LoRA was made for (SDXL base 1.0 here; pick yours). Convert LoRA reads its "
    "layers to name the LoRA's keys; both samplers draw with it."
)
TOOLS_LORA_NOTE = (
    "Convert LoRA: lora is another trainer's file in models/loras (ai-toolkit, diffusers/PEFT, kohya, "
    "musubi-tuner, OneTrainer, SimpleTuner), written in ComfyUI's keys to models/loras/converted/. Resize "
    "LoRA cuts the converted file to rank 8 (or an energy share). Each node shows what it did; the rest of "
    "the toolbox is in Add Node > EriDiffusion > LoRA."
)
TOOLS_COMPARE_NOTE = (
    "One prompt and seed drawn with the converted LoRA and with the resized one, each saved: compare them to "
    "see how much the smaller file changes the image."
)


def lora_tools_graph():
    """(nodes, groups), laid out, of checkpoint → Convert LoRA → Resize LoRA → two images to compare."""
    loader = Node(1, "CheckpointLoaderSimple", {"ckpt_name": "sd_xl_base_1.0.safetensors"})
    lora = [
        Node(
            2,
            "EriDiffusion_ConvertLoRA",
            {"lora": "their_lora.safetensors", "output": "converted/their_lora"},
            {"model": (1, 0)},
        ),
        Node(
            3,
            "EriDiffusion_ResizeLoRA",
            {"lora": "converted/their_lora.safetensors", "rank": 8, "output": "resized/their_lora"},
            {"lora": (2, 0), "model": (1, 0)},
        ),
    ]
    inputs = [
        Node(4, "CLIPTextEncode", {"text": "a photo of a dog in the snow"}, {"clip": (1, 1)}, title="Positive"),
        Node(5, "CLIPTextEncode", {"text": "blurry, low quality"}, {"clip": (1, 1)}, title="Negative"),
        Node(6, "EmptyLatentImage", {"width": 1024, "height": 1024, "batch_size": 1}),
    ]
    conditioning = {"positive": (4, 0), "negative": (5, 0), "latent_image": (6, 0)}
    sampling = {"seed": 42, "steps": 25, "cfg": 7.0}
    samplers = [
        Node(7, "KSampler", sampling, {"model": (2, 1), **conditioning}, title="With the converted LoRA"),
        Node(8, "KSampler", sampling, {"model": (3, 1), **conditioning}, title="With the resized LoRA"),
    ]
    images = [
        Node(9, "VAEDecode", {}, {"samples": (7, 0), "vae": (1, 2)}),
        Node(10, "VAEDecode", {}, {"samples": (8, 0), "vae": (1, 2)}),
    ]
    saved = [
        Node(11, "SaveImage", {"filename_prefix": "eridiffusion/converted"}, {"images": (9, 0)}, title="Converted"),
        Node(12, "SaveImage", {"filename_prefix": "eridiffusion/resized"}, {"images": (10, 0)}, title="Resized"),
    ]
    groups = [
        [Group("Model", COLORS["Model"], TOOLS_MODEL_NOTE, [[loader]])],
        [Group("LoRA", COLORS["Train"], TOOLS_LORA_NOTE, [lora])],
        [Group("Compare", COLORS["Test"], TOOLS_COMPARE_NOTE, [inputs, samplers, images, saved])],
    ]
    return lay_out(groups, first_note_id=13)


# The toolbox's example: no training, so its groups differ from the training examples'.
TOOL_EXAMPLES = {"lora_tools.json": lora_tools_graph}
ALL_EXAMPLES = {**EXAMPLES, **TOOL_EXAMPLES}


def to_ui(graph):
    """A UI-format (browser) workflow of `graph`, (nodes, groups) as lay_out returns them."""
    import nodes as comfy_nodes

    from devkit.workflow import has_control_widget, is_widget, widget_default

    graph_nodes, groups = graph
    graph_nodes = sorted(graph_nodes, key=lambda n: n.id)
    links, ui_nodes = [], []
    outgoing = {}
    for node in graph_nodes:
        for name, (source, slot) in node.links.items():
            links.append([len(links) + 1, source, slot, node.id, name])
            outgoing.setdefault((source, slot), []).append(len(links))
    link_ids = {(link[3], link[4]): link[0] for link in links}
    for order, node in enumerate(graph_nodes):
        entry = {
            "id": node.id,
            "type": node.type,
            "pos": list(node.pos),
            "size": list(node.size),
            "flags": {},
            "order": order,
            "mode": 0,
        }
        if node.type == NOTE:
            entry.update(
                inputs=[],
                outputs=[],
                properties={"text": ""},
                widgets_values=[node.widgets["text"]],
                color=NOTE_COLOR,
                bgcolor=NOTE_BGCOLOR,
            )
        else:
            cls = comfy_nodes.NODE_CLASS_MAPPINGS[node.type]
            definition = cls.INPUT_TYPES()
            specs = list(definition.get("required", {}).items()) + list(definition.get("optional", {}).items())
            sockets, values, widget_sockets = [], [], []
            for name, spec in specs:
                if not is_widget(spec):
                    sockets.append({"name": name, "type": spec[0], "link": link_ids.get((node.id, name))})
                    continue
                values.append(node.widgets.get(name, widget_default(spec)))
                if has_control_widget(name, spec):
                    values.append("fixed")
                if (node.id, name) in link_ids:  # a widget fed by a link: its socket, as the page saves it
                    link = link_ids[(node.id, name)]
                    widget_sockets.append({"name": name, "type": spec[0], "widget": {"name": name}, "link": link})
            sockets += widget_sockets  # after the node's own sockets, where the page puts them
            names = getattr(cls, "RETURN_NAMES", None) or cls.RETURN_TYPES
            outputs = [
                {"name": n, "type": t, "links": outgoing.get((node.id, i), []), "slot_index": i}
                for i, (n, t) in enumerate(zip(names, cls.RETURN_TYPES))
            ]
            if getattr(cls, "OUTPUT_NODE", False):
                # unlinked outputs of output nodes are left out: they differ between ComfyUI versions
                # (0.28's SaveImage and PreviewImage pass their images on), the page adds them on load
                while outputs and not outputs[-1]["links"]:
                    outputs.pop()
            entry.update(
                inputs=sockets,
                outputs=outputs,
                properties={"Node name for S&R": node.type},
                widgets_values=values,
            )
        if node.title:
            entry["title"] = node.title
        ui_nodes.append(entry)
    types = {}
    for node in graph_nodes:
        if node.type != NOTE:
            for i, t in enumerate(comfy_nodes.NODE_CLASS_MAPPINGS[node.type].RETURN_TYPES):
                types[(node.id, i)] = t
    ui_links = [
        [lid, src, slot, dst, _socket_index(ui_nodes, dst, name), types[(src, slot)]]
        for lid, src, slot, dst, name in links
    ]
    ui_groups = [
        {"id": i, "title": g.title, "bounding": list(g.bounding), "color": g.color, "font_size": 24, "flags": {}}
        for i, g in enumerate(groups, start=1)
    ]
    return {
        "last_node_id": max(n.id for n in graph_nodes),
        "last_link_id": len(links),
        "nodes": ui_nodes,
        "links": ui_links,
        "groups": ui_groups,
        "config": {},
        "extra": {},
        "version": 0.4,
    }


def _socket_index(ui_nodes, node_id, name):
    node = next(n for n in ui_nodes if n["id"] == node_id)
    return next(i for i, s in enumerate(node["inputs"]) if s["name"] == name)


def render_examples():
    """{file name: JSON text} of every example workflow."""
    return {name: json.dumps(to_ui(build()), indent=1) + "\n" for name, build in ALL_EXAMPLES.items()}


def load_example(name):
    with open(os.path.join(FOLDER, name)) as f:
        return json.load(f)


if __name__ == "__main__":
    from eridiffusion.runtime import start_host_in_temp_dir

    start_host_in_temp_dir("eridiffusion-workflows-")
    from devkit.workflow import load_extension

    load_extension()
    os.makedirs(FOLDER, exist_ok=True)
    for file_name, text in render_examples().items():
        with open(os.path.join(FOLDER, file_name), "w") as f:
            f.write(text)
        print("wrote", os.path.join(FOLDER, file_name))
