"""Running ComfyUI workflows headless: load EriDiffusion into the host as ComfyUI does, turn a
UI-format workflow (what the browser saves) into an API prompt, and run it through ComfyUI's
own PromptExecutor."""

import asyncio
import copy
import json
import os
import uuid

from devkit.paths import ROOT
from eridiffusion.comfy_compat import prompt_executor

WIDGET_TYPES = ("INT", "FLOAT", "STRING", "BOOLEAN", "COMBO")
PAGE_ONLY = ("Note", "MarkdownNote")  # nodes the page keeps to itself: never part of a prompt


def load_extension():
    """ComfyUI's built-in extra nodes (its own trainer among them), then EriDiffusion through
    ComfyUI's custom-node loader, as a server start does. Once per process."""
    import nodes

    if "EriDiffusion_LoRATrainer" not in nodes.NODE_CLASS_MAPPINGS:
        asyncio.run(nodes.init_extra_nodes(init_custom_nodes=False, init_api_nodes=False))
        if not asyncio.run(nodes.load_custom_node(ROOT)):
            raise RuntimeError(f"ComfyUI could not load {ROOT} as a custom node; see the log above.")
    return nodes.NODE_CLASS_MAPPINGS


def is_widget(spec):
    """Whether an input of spec `spec` (INPUT_TYPES' (type, options)) is a widget, not a socket."""
    kind = spec[0]
    return isinstance(kind, list) or kind in WIDGET_TYPES


def has_control_widget(name, spec):
    """The browser adds a 'control after generate' value after seed-like INT widgets."""
    options = spec[1] if len(spec) > 1 else {}
    return spec[0] == "INT" and options.get("control_after_generate", name in ("seed", "noise_seed"))


def widget_inputs(class_type):
    """[(input name, spec)] of a node's widget inputs in the order the browser lays them out."""
    import nodes

    definition = nodes.NODE_CLASS_MAPPINGS[class_type].INPUT_TYPES()
    ordered = list(definition.get("required", {}).items()) + list(definition.get("optional", {}).items())
    return [(name, spec) for name, spec in ordered if is_widget(spec)]


def ui_to_api(workflow):
    """The API prompt of a UI-format workflow (muted and bypassed nodes, and notes, left out)."""
    links = {link[0]: link for link in workflow["links"]}
    prompt = {}
    for node in workflow["nodes"]:
        if node.get("mode", 0) != 0 or node["type"] in PAGE_ONLY:
            continue
        inputs = {}
        values = list(node.get("widgets_values", []))
        for name, spec in widget_inputs(node["type"]):
            if not values:
                break
            inputs[name] = values.pop(0)
            if has_control_widget(name, spec) and values:
                values.pop(0)
        for socket in node.get("inputs", []):
            if socket.get("link") is not None:
                _, from_node, from_slot, _, _, _ = links[socket["link"]]
                inputs[socket["name"]] = [str(from_node), from_slot]
        prompt[str(node["id"])] = {"class_type": node["type"], "inputs": inputs}
    return prompt


def substitute(prompt, replacements=None, overrides=None):
    """A copy of `prompt` with node types swapped ({old type: (new type, inputs)}) and widget
    values changed ({node type: {input: value}})."""
    prompt = copy.deepcopy(prompt)
    for node in prompt.values():
        if replacements and node["class_type"] in replacements:
            node["class_type"], node["inputs"] = replacements[node["class_type"]]
            node["inputs"] = dict(node["inputs"])
        for name, value in (overrides or {}).get(node["class_type"], {}).items():
            node["inputs"][name] = value
    return prompt


# The (MODEL, CLIP, VAE) slot of a checkpoint's stack that each output of a loader gives: ComfyUI's
# separate loaders one each, a checkpoint loader its own three (LTX-2's, whose text encoder is read apart).
LOADER_SLOTS = {
    "UNETLoader": (0,),
    "CheckpointLoaderSimple": (0, 1, 2),
    "CLIPLoader": (1,),
    "DualCLIPLoader": (1,),
    "LTXAVTextEncoderLoader": (1,),
    "VAELoader": (2,),
}


def with_family_stack(prompt, family):
    """A copy of `prompt` whose loaders (LOADER_SLOTS) are one tiny stack of `family` (tiny_family_node),
    every link to a loader's output linked to the stack's MODEL, CLIP or VAE instead, and whose
    LTXVAudioVAELoader is LTX-2's tiny audio VAE. A second diffusion model's loader (Wan 2.2 14B's
    low-noise expert beside the high-noise one) is the MODEL of a stack of its own, seeded 1: in node id
    order, the k-th diffusion model is the stack of seed k."""
    from devkit import tiny_family_node

    prompt = copy.deepcopy(prompt)
    loaders = {i: LOADER_SLOTS[n["class_type"]] for i, n in prompt.items() if n["class_type"] in LOADER_SLOTS}
    models = sorted((i for i, slots in loaders.items() if slots[0] == 0), key=int)
    if not models:
        raise ValueError(f"the prompt loads no diffusion model: {sorted(loaders)}")
    for node_id in loaders:
        del prompt[node_id]
    first = max(int(i) for i in prompt) + 1
    stacks = {node_id: str(first + seed) for seed, node_id in enumerate(models)}
    for node in prompt.values():
        for name, value in node["inputs"].items():
            if isinstance(value, list) and value[0] in loaders:
                node["inputs"][name] = [stacks.get(value[0], stacks[models[0]]), loaders[value[0]][value[1]]]
        if node["class_type"] == "LTXVAudioVAELoader":
            node.update(class_type=tiny_family_node.AUDIO_VAE_NODE, inputs={"seed": 0})
    for seed, stack in enumerate(stacks.values()):
        prompt[stack] = {"class_type": tiny_family_node.NODE_NAME, "inputs": {"family": family, "seed": seed}}
    return prompt


def missing_on_host(prompt):
    """The node types and choices of `prompt` the running host does not offer (an older ComfyUI's)."""
    import nodes

    missing = []
    for node in prompt.values():
        if node["class_type"] not in nodes.NODE_CLASS_MAPPINGS:
            missing.append(node["class_type"])
            continue
        for name, spec in widget_inputs(node["class_type"]):
            options = spec[1] if len(spec) > 1 else {}
            choices = spec[0] if isinstance(spec[0], list) else options.get("options")
            value = node["inputs"].get(name)
            if choices is not None and not options.get("image_upload") and value not in choices:
                missing.append(f"{node['class_type']}'s {name} {value}")
    return missing


class HeadlessServer:
    """What PromptExecutor needs of ComfyUI's web server when none runs: it keeps the events."""

    def __init__(self):
        self.client_id = None
        self.last_node_id = None
        self.last_prompt_id = None
        self.events = []

    def send_sync(self, event, data, sid=None):
        self.events.append((event, data))

    def queue_updated(self):
        pass


def run_prompt(prompt, server=None):
    """Validate and execute `prompt` with ComfyUI's executor, its events going to `server` (a
    HeadlessServer, a new one if None); returns (executor, server)."""
    import execution

    prompt_id = str(uuid.uuid4())
    valid = asyncio.run(execution.validate_prompt(prompt_id, prompt, None))
    if not valid[0]:
        raise RuntimeError(f"ComfyUI rejected the prompt: {valid[1]} {valid[3]}")
    server = server if server is not None else HeadlessServer()
    executor = prompt_executor(server)
    executor.execute(prompt, prompt_id, {"client_id": "headless"}, valid[2])  # events go to a client only
    return executor, server


def execution_error(executor):
    """The exception message ComfyUI recorded for a failed run, or None."""
    for kind, data in executor.status_messages:
        if kind == "execution_error":
            return f"{data.get('node_type')}: {data.get('exception_message')}".rstrip()  # ComfyUI adds a newline
    return None


def widget_default(spec):
    """The value a widget of spec `spec` starts at in the browser: its default, else its first choice."""
    options = spec[1] if len(spec) > 1 else {}
    if "default" in options:
        return options["default"]
    choices = spec[0] if isinstance(spec[0], list) else options.get("options", [])
    return choices[0] if choices else None


def widget_defaults(class_type):
    """{widget input: default} of a node."""
    return {name: widget_default(spec) for name, spec in widget_inputs(class_type)}


def input_names(class_type):
    """The names of a node's inputs, widgets and sockets, required and optional."""
    import nodes

    definition = nodes.NODE_CLASS_MAPPINGS[class_type].INPUT_TYPES()
    return [*definition.get("required", {}), *definition.get("optional", {})]


def trainer_setting_nodes():
    """{node type: LoRATrainer input it is linked to ('' for the trainer itself)} of the nodes that
    hold training settings: the trainer, its options nodes and TrainingObjective."""
    from eridiffusion.nodes.options_nodes import OPTIONS_NODES

    nodes = {"EriDiffusion_LoRATrainer": "", "EriDiffusion_TrainingObjective": "objective"}
    nodes.update({node.NODE_ID: node.TRAINER_INPUT for node in OPTIONS_NODES})
    return nodes


def _linked_holder(prompt, host_id, holder, socket):
    """The id of node type `holder` linked to input `socket` of node `host_id`: added with its defaults
    and linked when there is none."""
    link = prompt[host_id]["inputs"].get(socket)
    if link is None:
        node_id = str(max(int(i) for i in prompt) + 1)
        prompt[node_id] = {"class_type": holder, "inputs": widget_defaults(holder)}
        prompt[host_id]["inputs"][socket] = link = [node_id, 0]
    return link[0]


def set_training_settings(prompt, settings):
    """Put each of `settings` ({name: value or link}) on the node of `prompt` that holds it: the trainer's
    own input, else its options node (or TrainingObjective), which is added and linked when missing."""
    trainer_id = next(i for i, n in prompt.items() if n["class_type"] == "EriDiffusion_LoRATrainer")
    for name, value in settings.items():
        holder = next((t for t in trainer_setting_nodes() if name in input_names(t)), None)
        if holder is None:
            raise KeyError(f"no node holds the training setting {name!r}")
        socket = trainer_setting_nodes()[holder]
        node_id = _linked_holder(prompt, trainer_id, holder, socket) if socket else trainer_id
        prompt[node_id]["inputs"][name] = value
    return prompt


def media_options_node(class_type):
    """The media options node type that feeds node type `class_type`'s media_options, or None."""
    from eridiffusion.nodes.media_options import MEDIA_OPTIONS_NODES

    return next((n.NODE_ID for n in MEDIA_OPTIONS_NODES if f"EriDiffusion_{n.HOST}" == class_type), None)


def set_inputs(prompt, node_id, values):
    """Put each of `values` ({input: value or link}) on node `node_id` of `prompt`: its own input, else
    its media options node's (DatasetMediaOptions ...), which is added and linked when missing."""
    node = prompt[node_id]
    for name, value in values.items():
        holder = media_options_node(node["class_type"])
        if name in input_names(node["class_type"]):
            node["inputs"][name] = value
        elif holder is not None and name in input_names(holder):
            prompt[_linked_holder(prompt, node_id, holder, "media_options")]["inputs"][name] = value
        else:
            raise KeyError(f"no input {name!r} on {node['class_type']} or its media options")
    return prompt


def training_prompt(
    dataset,
    trainer=None,
    resume=None,
    train_text_encoder=False,
    save=None,
    architecture="sd15",
    resolution=128,
    dataset_options=None,
    cache_folder="",
    stack=None,
    validation_dataset=None,
    regularization_dataset=None,
    cache_options=None,
):
    """An API prompt: tiny demo model → LoadDataset(`dataset`) → CacheLatents → LoRATrainer → SaveLoRA.
    `trainer` holds training settings (each goes to the trainer or the options node that holds it),
    `save`, `dataset_options` and `cache_options` override the inputs of SaveLoRA, LoadDataset and
    CacheLatents (or of their media options nodes, set_inputs); `resume` is a
    LoadLoRAForTraining path linked to the trainer; `train_text_encoder` links the CLIP to it;
    `stack` ({class_type, inputs}) replaces
    the demo model node (tiny_family_node: any family);
    `validation_dataset` and `regularization_dataset` are folders of second LoadDatasets into
    CacheLatents' inputs of those names."""
    defaults = widget_defaults
    prompt = {
        "1": stack or {"class_type": "EriDiffusion_TinyDemoModel", "inputs": {"architecture": architecture, "seed": 0}},
        "2": {
            "class_type": "EriDiffusion_LoadDataset",
            "inputs": {**defaults("EriDiffusion_LoadDataset"), "folder": str(dataset)},
        },
        "3": {
            "class_type": "EriDiffusion_CacheLatents",
            "inputs": {
                **defaults("EriDiffusion_CacheLatents"),
                "resolution": resolution,
                "dataset": ["2", 0],
                "vae": ["1", 2],
                "clip": ["1", 1],
                "cache_folder": str(cache_folder),
            },
        },
        "4": {
            "class_type": "EriDiffusion_LoRATrainer",
            "inputs": {**defaults("EriDiffusion_LoRATrainer"), "model": ["1", 0], "training_data": ["3", 0]},
        },
        "5": {
            "class_type": "EriDiffusion_SaveLoRA",
            "inputs": {**defaults("EriDiffusion_SaveLoRA"), "lora": ["4", 1], **(save or {})},
        },
    }
    for node_id, (name, folder) in enumerate(
        (("validation_dataset", validation_dataset), ("regularization_dataset", regularization_dataset)), start=20
    ):
        if folder is not None:
            load = {**defaults("EriDiffusion_LoadDataset"), "folder": str(folder)}
            prompt[str(node_id)] = {"class_type": "EriDiffusion_LoadDataset", "inputs": load}
            prompt["3"]["inputs"][name] = [str(node_id), 0]
    set_inputs(prompt, "2", dataset_options or {})
    set_inputs(prompt, "3", cache_options or {})
    set_training_settings(prompt, trainer or {})
    if train_text_encoder:
        prompt["4"]["inputs"]["clip"] = ["1", 1]
    if resume is not None:
        resume_id = str(max(int(i) for i in prompt) + 1)
        prompt[resume_id] = {"class_type": "EriDiffusion_LoadLoRAForTraining", "inputs": {"path": str(resume)}}
        prompt["4"]["inputs"]["resume"] = [resume_id, 0]
    return prompt


# Small enough that a run through the executor takes seconds on two CPU cores.
QUICK = {"steps": 2, "learning_rate": 3e-3, "rank": 4, "alpha": 4.0, "dtype": "fp32", "gradient_checkpointing": False}


class Outcome:
    """A prompt's result: success, ComfyUI's recorded error, and the run's folder and files."""

    def __init__(self, executor, run_dir):
        self.executor, self.run_dir = executor, run_dir
        self.success, self.error = executor.success, execution_error(executor)

    def losses(self):
        with open(os.path.join(self.run_dir, "loss.json")) as f:
            return json.load(f)["loss"]

    def summary(self):
        with open(os.path.join(self.run_dir, "summary.json")) as f:
            return json.load(f)

    def checkpoints(self):
        folder = os.path.join(self.run_dir, "checkpoints")
        return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


def family_prompt(name, dataset, run_name, **options):
    """training_prompt of tiny family `name`'s stack (tiny_family_node) on `dataset` as run
    `run_name`: its steps and resolution, rank 8 on every linear layer, the LoRA saved as
    <run_name>/lora; `options` as training_prompt takes them."""
    from devkit import tiny_family_node
    from devkit.tiny_models import TINY_FAMILIES

    tiny = TINY_FAMILIES[name]
    settings = {**QUICK, "steps": tiny.steps, "rank": 8, "alpha": 8.0, "targets": "all-linear", "run_name": run_name}
    stack = {"class_type": tiny_family_node.NODE_NAME, "inputs": {"family": name, "seed": 0}}
    options = {"save": {"filename_prefix": f"{run_name}/lora"}, "resolution": tiny.resolution, **options}
    return training_prompt(dataset, settings, stack=stack, **options)


def with_sampler(prompt, **values):
    """`prompt` with a SampleDuringTraining (the stack's CLIP and VAE; `values` over its inputs' defaults,
    set_inputs) linked to its LoRATrainer."""
    node_id = str(max(int(i) for i in prompt) + 1)
    inputs = {**widget_defaults("EriDiffusion_SampleDuringTraining"), "clip": ["1", 1], "vae": ["1", 2]}
    prompt[node_id] = {"class_type": "EriDiffusion_SampleDuringTraining", "inputs": inputs}
    set_inputs(prompt, node_id, values)
    prompt["4"]["inputs"]["sample_config"] = [node_id, 0]
    return prompt


def run_named(prompt, run_name):
    """The Outcome of running `prompt`, whose run is named `run_name`, through the executor."""
    import folder_paths

    executor, _ = run_prompt(prompt)
    return Outcome(executor, os.path.join(folder_paths.get_output_directory(), run_name))


def run_training(dataset, run_name, resolution=64, trainer=None, **options):
    """Run training_prompt(dataset, QUICK settings updated with `trainer`, ...) through the executor as
    run `run_name` (unique in the test session: its folder is output/<run_name>)."""
    import folder_paths

    settings = {**QUICK, **(trainer or {}), "run_name": run_name}
    executor, _ = run_prompt(training_prompt(dataset, settings, resolution=resolution, **options))
    return Outcome(executor, os.path.join(folder_paths.get_output_directory(), run_name))


def node_outputs(executor, node_id):
    """The outputs (one value per output slot) a node of the last prompt run by `executor` left in ComfyUI's
    output cache: its MODEL, its TRAINING_DATA ... as the next node got them. 0.28's cache is read with await."""
    import inspect

    entry = executor.caches.outputs.get(str(node_id))
    if inspect.isawaitable(entry):
        entry = asyncio.run(entry)
    outputs = entry.outputs if hasattr(entry, "outputs") else entry
    return [values[0] for values in outputs]
