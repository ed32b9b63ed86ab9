"""The example workflows in example_workflows/, generated from the host's node definitions so the
widget order always matches the nodes. `python -m tests.support.example_workflows` (with the host started)
rewrites the files; a test checks that the committed ones are current."""

import json
import os
from dataclasses import dataclass, field

from .paths import ROOT

FOLDER = os.path.join(ROOT, "example_workflows")


@dataclass
class Node:
    id: int
    type: str
    pos: tuple
    widgets: dict = field(default_factory=dict)  # input name → value; missing ones take the default
    links: dict = field(default_factory=dict)  # input name → (node id, output slot)
    title: str = ""


def training_graph(checkpoint, resolution, prompt, sample_prompts, loader=None, trainer=None, sampling=None):
    """Checkpoint → dataset → cache → trainer (with samples) → KSampler test image, SaveLoRA, LossGraph.
    `loader` replaces the checkpoint loader (same MODEL, CLIP, VAE outputs); `trainer` and
    `sampling` override widget values of the trainer and of the samplers."""
    trainer, sampling = trainer or {}, sampling or {}
    trainer_node = Node(
        5,
        "EriDiffusion_LoRATrainer",
        (820, 60),
        {"run_name": "sks_dog"},
        {"model": (1, 0), "training_data": (3, 0), "sample_config": (4, 0)},
    )
    options = _place_settings(trainer_node, trainer, first_id=15, pos=(40, 700))
    return [
        loader or Node(1, "CheckpointLoaderSimple", (40, 60), {"ckpt_name": checkpoint}),
        Node(2, "EriDiffusion_LoadDataset", (40, 260), {"folder": "dreambooth_dog", "trigger_word": "sks"}),
        Node(
            3,
            "EriDiffusion_CacheLatents",
            (420, 260),
            {"resolution": resolution},
            {"dataset": (2, 0), "vae": (1, 2), "clip": (1, 1)},
        ),
        Node(
            4,
            "EriDiffusion_SampleDuringTraining",
            (420, 520),
            {"prompts": sample_prompts, "width": resolution, "height": resolution, **sampling},
            {"clip": (1, 1), "vae": (1, 2)},
        ),
        trainer_node,
        Node(6, "EriDiffusion_SaveLoRA", (1220, 60), {"filename_prefix": "eridiffusion/sks_dog"}, {"lora": (5, 1)}),
        Node(7, "EriDiffusion_LossGraph", (1220, 200), {}, {"loss": (5, 2)}),
        Node(8, "PreviewImage", (1220, 520), {}, {"images": (5, 3)}, title="Samples during training"),
        Node(9, "CLIPTextEncode", (820, 1300), {"text": prompt}, {"clip": (1, 1)}, title="Positive"),
        Node(10, "CLIPTextEncode", (820, 1500), {"text": "blurry, low quality"}, {"clip": (1, 1)}, title="Negative"),
        Node(11, "EmptyLatentImage", (820, 1700), {"width": resolution, "height": resolution, "batch_size": 1}),
        Node(
            12,
            "KSampler",
            (1220, 1300),
            {"seed": 42, "steps": sampling.get("steps", 25), "cfg": sampling.get("cfg", 7.0)},
            {"model": (5, 0), "positive": (9, 0), "negative": (10, 0), "latent_image": (11, 0)},
        ),
        Node(13, "VAEDecode", (1600, 1300), {}, {"samples": (12, 0), "vae": (1, 2)}),
        Node(14, "SaveImage", (1840, 1300), {"filename_prefix": "eridiffusion/sks_dog"}, {"images": (13, 0)}),
        *options,
    ]


def _place_settings(trainer_node, settings, first_id, pos):
    """Each of `settings` on the trainer (its own widget) or on an options node linked to it; the
    options nodes made, stacked from `pos`."""
    from .workflow import trainer_setting_nodes, widget_defaults

    options = {}
    for name, value in settings.items():
        holder = next(t for t in trainer_setting_nodes() if name in widget_defaults(t))
        socket = trainer_setting_nodes()[holder]
        if not socket:
            trainer_node.widgets[name] = value
            continue
        if holder not in options:
            x, y = pos
            options[holder] = Node(first_id + len(options), holder, (x, y + 200 * len(options)))
            trainer_node.links[socket] = (options[holder].id, 0)
        options[holder].widgets[name] = value
    return list(options.values())


EXAMPLES = {
    "sdxl_lora.json": lambda: training_graph(
        "sd_xl_base_1.0.safetensors",
        1024,
        "a photo of sks dog wearing a red scarf, in the snow",
        "a photo of sks dog\na photo of sks dog on the beach",
    ),
    "sd15_lora.json": lambda: training_graph(
        "v1-5-pruned-emaonly.safetensors",
        512,
        "a photo of sks dog wearing a red scarf, in the snow",
        "a photo of sks dog\na photo of sks dog on the beach",
    ),
    # Runs anywhere in about a minute on a CPU: a tiny random-weight SDXL (it draws noise), the
    # settings of the README's demo.
    "tiny_demo_lora.json": lambda: training_graph(
        None,
        256,
        "a photo of sks dog wearing a red scarf, in the snow",
        "a photo of sks dog\na photo of sks dog on the beach",
        loader=Node(1, "EriDiffusion_TinyDemoModel", (40, 60), {"architecture": "sdxl"}),
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


def _default(spec):
    options = spec[1] if len(spec) > 1 else {}
    if "default" in options:
        return options["default"]
    choices = spec[0] if isinstance(spec[0], list) else options.get("options", [])
    return choices[0] if choices else None


def to_ui(graph):
    """A UI-format (browser) workflow of `graph`."""
    import nodes as comfy_nodes

    from .workflow import _has_control_widget, _is_widget

    links, ui_nodes = [], []
    outgoing = {}
    for node in graph:
        for name, (source, slot) in node.links.items():
            links.append([len(links) + 1, source, slot, node.id, name])
            outgoing.setdefault((source, slot), []).append(len(links))
    link_ids = {(link[3], link[4]): link[0] for link in links}
    for order, node in enumerate(graph):
        cls = comfy_nodes.NODE_CLASS_MAPPINGS[node.type]
        definition = cls.INPUT_TYPES()
        specs = list(definition.get("required", {}).items()) + list(definition.get("optional", {}).items())
        sockets, values = [], []
        for name, spec in specs:
            if _is_widget(spec):
                values.append(node.widgets.get(name, _default(spec)))
                if _has_control_widget(name, spec):
                    values.append("fixed")
            else:
                sockets.append({"name": name, "type": spec[0], "link": link_ids.get((node.id, name))})
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
        entry = {
            "id": node.id,
            "type": node.type,
            "pos": list(node.pos),
            "size": [340, 120 + 26 * len(values)],
            "flags": {},
            "order": order,
            "mode": 0,
            "inputs": sockets,
            "outputs": outputs,
            "properties": {"Node name for S&R": node.type},
            "widgets_values": values,
        }
        if node.title:
            entry["title"] = node.title
        ui_nodes.append(entry)
    types = {}
    for node in graph:
        cls = comfy_nodes.NODE_CLASS_MAPPINGS[node.type]
        for i, t in enumerate(cls.RETURN_TYPES):
            types[(node.id, i)] = t
    ui_links = [
        [lid, src, slot, dst, _socket_index(ui_nodes, dst, name), types[(src, slot)]]
        for lid, src, slot, dst, name in links
    ]
    return {
        "last_node_id": max(n.id for n in graph),
        "last_link_id": len(links),
        "nodes": ui_nodes,
        "links": ui_links,
        "groups": [],
        "config": {},
        "extra": {},
        "version": 0.4,
    }


def _socket_index(ui_nodes, node_id, name):
    node = next(n for n in ui_nodes if n["id"] == node_id)
    return next(i for i, s in enumerate(node["inputs"]) if s["name"] == name)


def render_examples():
    """{file name: JSON text} of every example workflow."""
    return {name: json.dumps(to_ui(build()), indent=1) + "\n" for name, build in EXAMPLES.items()}


def load_example(name):
    with open(os.path.join(FOLDER, name)) as f:
        return json.load(f)


if __name__ == "__main__":
    import tempfile

    from eridiffusion.runtime import start_host

    start_host(tempfile.mkdtemp(prefix="eridiffusion-workflows-"))
    from .workflow import load_extension

    load_extension()
    os.makedirs(FOLDER, exist_ok=True)
    for file_name, text in render_examples().items():
        with open(os.path.join(FOLDER, file_name), "w") as f:
            f.write(text)
        print("wrote", os.path.join(FOLDER, file_name))
