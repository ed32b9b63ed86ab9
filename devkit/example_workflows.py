"""The example workflows in example_workflows/, generated from the host's node definitions so the
widget order always matches the nodes, and laid out on a grid (devkit/example_graphs.py): groups
Model, Data, Train and Test, each with a Note, at the sizes the page gives the nodes; the SD
checkpoints' and the tiny demo's here, the 2026 models' in devkit/family_examples.py, those that train on
sound in devkit/audio_examples.py. `python -m
devkit.example_workflows` (with the host started) rewrites the files; a test checks that the committed
ones are current, the browser test that the page shows them without overlaps."""

import json
import os

from devkit.audio_examples import AUDIO_EXAMPLES, AUDIO_SINCE
from devkit.example_graphs import COLORS, NOTE_BGCOLOR, NOTE_COLOR, Group, Node, lay_out, training_graph
from devkit.family_examples import FAMILY_EXAMPLES
from devkit.family_examples import SINCE as FAMILY_SINCE
from devkit.node_sizes import NOTE
from devkit.paths import ROOT

FOLDER = os.path.join(ROOT, "example_workflows")

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


FINE_TUNE_TRAIN_NOTE = (
    "LoRATrainer with algorithm full trains the model's own weights (AdapterOptions: every linear layer, "
    "convolution and norm). For SDXL on a 24 GB card: Adafactor at about 1e-5 (OptimizerOptions); "
    "gradient_checkpointing, fused_backward and fine_tune_dtype bf16 with stochastic_rounding (MemoryOptions, "
    "OptimizerOptions). SaveFineTune writes a checkpoint with the CLIP and VAE to models/checkpoints/eridiffusion/."
)
FINE_TUNE_TEST_NOTE = (
    "Draws one image with the fine-tuned MODEL: change the prompt to try it. The saved checkpoint loads in a "
    "stock Load Checkpoint node."
)
# Full fine-tunes: the model's own weights trained and saved whole (SaveFineTune), no LoRA.
FINE_TUNE_EXAMPLES = {
    "sdxl_finetune.json": lambda: training_graph(
        "sd_xl_base_1.0.safetensors",
        1024,
        "a photo of sks dog wearing a red scarf, in the snow",
        "a photo of sks dog\na photo of sks dog on the beach",
        SD_MODEL_NOTE.format("SDXL base 1.0 here"),
        trainer={
            "algorithm": "full",
            "learning_rate": 1e-5,
            "steps": 1000,
            "run_name": "sks_dog_sdxl_finetune",
            "targets": "all-linear",
            "conv_rank": 1,
            "train_norms_and_biases": True,
            "optimizer": "Adafactor",
            "gradient_checkpointing": True,
            "fused_backward": True,
            "fine_tune_dtype": "bf16",
            "stochastic_rounding": True,
        },
        train_note=FINE_TUNE_TRAIN_NOTE,
        test_note=FINE_TUNE_TEST_NOTE,
        save=Node(
            6,
            "EriDiffusion_SaveFineTune",
            {"filename_prefix": "eridiffusion/sks_dog_sdxl"},
            {"fine_tune": (5, 1), "clip": (1, 1), "vae": (1, 2)},
        ),
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
ALL_EXAMPLES = {**EXAMPLES, **FINE_TUNE_EXAMPLES, **FAMILY_EXAMPLES, **AUDIO_EXAMPLES, **TOOL_EXAMPLES}
SINCE = {**FAMILY_SINCE, **AUDIO_SINCE}


def to_ui(graph):
    """A UI-format (browser) workflow of `graph`, (nodes, groups) as lay_out returns them."""
    import nodes as comfy_nodes

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
            entry.update(_ui_sockets(node, link_ids, outgoing))
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


def _ui_sockets(node, link_ids, outgoing):
    """A node's inputs, outputs, properties and widget values as the page saves them; `link_ids`:
    {(node id, input name): link id}, `outgoing`: {(node id, output slot): [link id, ...]}."""
    import nodes as comfy_nodes

    from devkit.workflow import has_control_widget, is_widget, widget_default

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
    return {
        "inputs": sockets,
        "outputs": outputs,
        "properties": {"Node name for S&R": node.type},
        "widgets_values": values,
    }


def _socket_index(ui_nodes, node_id, name):
    node = next(n for n in ui_nodes if n["id"] == node_id)
    return next(i for i, s in enumerate(node["inputs"]) if s["name"] == name)


def examples_on_host():
    """The examples whose files the running ComfyUI writes as committed (SINCE: family_examples and
    audio_examples)."""
    from devkit.tiny_models import version_key
    from eridiffusion.comfy_compat import host_version

    host = version_key(host_version())
    return {name: build for name, build in ALL_EXAMPLES.items() if version_key(SINCE.get(name, "0")) <= host}


def render_examples():
    """{file name: JSON text} of every example workflow that runs on this host (the files are written
    on the newest tested one)."""
    return {name: json.dumps(to_ui(build()), indent=1) + "\n" for name, build in examples_on_host().items()}


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
