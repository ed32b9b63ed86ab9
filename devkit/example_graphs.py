"""The graphs of the example workflows, as laid out on the page: nodes in titled groups of columns
(Model, Data, Train, Test), each group with a Note on top, at the sizes the page gives the nodes
(devkit/node_sizes.py), and the training graph every training example is built from."""

from dataclasses import dataclass, field

from devkit import node_sizes
from devkit.node_sizes import NOTE, TITLE, WIDTH


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


# Where the training graph's MODEL, CLIP and VAE come from by default (a checkpoint loader's three
# outputs), and the trained MODEL the Test group draws with.
CHECKPOINT_SOURCES = {"model": (1, 0), "clip": (1, 1), "vae": (1, 2)}
TRAINED_MODEL = (5, 0)


def training_graph(
    checkpoint,
    resolution,
    prompt,
    sample_prompts,
    model_note,
    loader=None,
    trainer=None,
    options=(),
    sampling=None,
    **parts,
):
    """(nodes, groups), laid out, of checkpoint → dataset → cache → trainer (with samples) → KSampler
    test image, SaveLoRA, LossGraph. `loader` replaces the checkpoint loader: one node of the same
    MODEL, CLIP, VAE outputs, or the Model group's nodes (a list) with parts["sources"] ({"model",
    "clip", "vae": (node id, output slot)}) naming where each comes from; `trainer` sets training
    settings (on the trainer or the options node that holds them), `options` names options nodes to
    show even at their defaults, `sampling` overrides widget values of the samplers. parts["dataset"]
    overrides LoadDataset's widget values, parts["data_note"] the Data group's Note and
    parts["train_note"] the Train group's, parts["save"] a node in SaveLoRA's place (SaveFineTune);
    parts["test"] gives the Test group's columns (default: test_columns') and parts["test_note"] its
    Note; parts["cache"] overrides CacheLatents' widget values and parts["start_image"] links the
    samples' first frame (image-to-video), parts["audio_vae"] (node id, output slot) the audio VAE that
    CacheLatents encodes each clip's sound with and the samples are drawn with (LTX-2);
    parts["low_noise_model"] (node id, output slot) is the low-noise expert of a two-expert run (Wan 2.2
    14B), linked to TrainingObjective's low_noise_model, each expert's LoRA saved by its own SaveLoRA.
    Values and links a node holds in its media options node (frames, start_image, audio_vae ...) go
    there, below the node (with_media_options)."""
    sampling = sampling or {}
    sources = parts.get("sources", CHECKPOINT_SOURCES)
    if not isinstance(loader, list):
        loader = [loader or Node(1, "CheckpointLoaderSimple", {"ckpt_name": checkpoint})]
    dataset = {"folder": "dreambooth_dog", "trigger_word": "sks", **parts.get("dataset", {})}
    data = [
        *with_media_options(Node(2, "EriDiffusion_LoadDataset", dataset), MEDIA_IDS[0]),
        *with_media_options(
            Node(
                3,
                "EriDiffusion_CacheLatents",
                {"resolution": resolution, **parts.get("cache", {})},
                {"dataset": (2, 0), "vae": sources["vae"], "clip": sources["clip"], **_audio_vae(parts)},
            ),
            MEDIA_IDS[1],
        ),
    ]
    train = _train_columns(resolution, sample_prompts, trainer or {}, options, sampling, sources, parts)
    test = parts.get("test") or test_columns(prompt, resolution, sampling, sources)
    groups = [
        [
            Group("Model", COLORS["Model"], model_note, [loader]),
            Group("Data", COLORS["Data"], parts.get("data_note", DATA_NOTE), [data]),
        ],
        [Group("Train", COLORS["Train"], parts.get("train_note", TRAIN_NOTE), train)],
        [Group("Test", COLORS["Test"], parts.get("test_note", TEST_NOTE), test)],
    ]
    last = max(node.id for stack in groups for group in stack for column in group.columns for node in column)
    return lay_out(groups, first_note_id=last + 1)


def _audio_vae(parts):
    """{"audio_vae": link} where parts["audio_vae"] is given (LTX-2), else {}."""
    return {"audio_vae": parts["audio_vae"]} if "audio_vae" in parts else {}


MEDIA_IDS = (25, 26, 27)  # the media options nodes of LoadDataset, CacheLatents and SampleDuringTraining


def with_media_options(node, media_id):
    """[node] holding its own widgets and links; [node, its media options node] (of id `media_id`, linked to
    its media_options) when some of them are that one's (frames, start_image ...)."""
    from devkit.workflow import input_names, media_options_node

    holder = media_options_node(node.type)
    own = input_names(node.type)
    widgets = {k: v for k, v in node.widgets.items() if k not in own}
    links = {k: v for k, v in node.links.items() if k not in own}
    if not widgets and not links:
        return [node]
    for name in (*widgets, *links):
        if holder is None or name not in input_names(holder):
            raise KeyError(f"no input {name!r} on {node.type} or its media options")
    node.widgets = {k: v for k, v in node.widgets.items() if k in own}
    node.links = {k: v for k, v in node.links.items() if k in own}
    node.links["media_options"] = (media_id, 0)
    return [node, Node(media_id, holder, widgets, links)]


# The SaveLoRA of a two-expert run's low-noise LoRA (LoRATrainer's output 6); the high-noise one is
# SaveLoRA 6, of its output 1.
LOW_NOISE_SAVE, LOW_NOISE_LORA = 30, (5, 6)


def _train_columns(resolution, sample_prompts, trainer, options, sampling, sources, parts):
    """The Train group's columns: SampleDuringTraining and the options nodes, LoRATrainer, and what it
    gives (SaveLoRA, LossGraph, the samples' preview); with parts["low_noise_model"], two experts trained
    and a SaveLoRA for each, with parts["start_image"] the samples' first frame, with parts["audio_vae"]
    their sound."""
    low_noise_model = parts.get("low_noise_model")
    trainer_node = Node(
        5,
        "EriDiffusion_LoRATrainer",
        {"run_name": "sks_dog"},
        {"model": sources["model"], "training_data": (3, 0), "sample_config": (4, 0)},
    )
    if low_noise_model is not None:
        options = (*options, "EriDiffusion_TrainingObjective")
    options = _place_settings(trainer_node, trainer, options, first_id=15)
    sampler = Node(
        4,
        "EriDiffusion_SampleDuringTraining",
        {"prompts": sample_prompts, "width": resolution, "height": resolution, **sampling},
        {"clip": sources["clip"], "vae": sources["vae"]},
    )
    for name in ("start_image", "audio_vae"):
        if name in parts:
            sampler.links[name] = parts[name]
    sampler_nodes = with_media_options(sampler, MEDIA_IDS[2])
    saves = [
        parts.get("save")
        or Node(6, "EriDiffusion_SaveLoRA", {"filename_prefix": "eridiffusion/sks_dog"}, {"lora": (5, 1)})
    ]
    if low_noise_model is not None:
        objective = next(n for n in options if n.type == "EriDiffusion_TrainingObjective")
        objective.links["low_noise_model"] = low_noise_model
        saves[0].widgets["filename_prefix"] += "_high_noise"
        saves[0].title = "SaveLoRA: high-noise expert"
        low = {"filename_prefix": "eridiffusion/sks_dog_low_noise"}
        saves.append(
            Node(
                LOW_NOISE_SAVE,
                "EriDiffusion_SaveLoRA",
                low,
                {"lora": LOW_NOISE_LORA},
                title="SaveLoRA: low-noise expert",
            )
        )
    results = [
        *saves,
        Node(7, "EriDiffusion_LossGraph", {}, {"loss": (5, 2)}),
        Node(8, "PreviewImage", {}, {"images": (5, 3)}, title="Samples during training"),
    ]
    return [[*sampler_nodes, *options], [trainer_node], results]


KSAMPLER_SETTINGS = ("steps", "cfg", "sampler_name", "scheduler")


def test_columns(
    prompt, resolution, sampling, sources, latent="EmptyLatentImage", negative="blurry, low quality", **chains
):
    """The Test group's columns: the prompt (and a negative one, or ConditioningZeroOut of the prompt
    where `negative` is None) and an empty `latent` image drawn by KSampler with the trained MODEL,
    decoded and saved. chains["model"] are the nodes that patch the MODEL between the trainer and
    the KSampler (ModelSamplingAuraFlow, CFGNorm ...), chains["positive"] those that patch the
    prompt's conditioning (FluxGuidance), each linked to the one before; KSampler takes the seed 42
    and the steps, cfg, sampler and scheduler of `sampling` (SampleDuringTraining's)."""
    positive = Node(9, "CLIPTextEncode", {"text": prompt}, {"clip": sources["clip"]}, title="Positive")
    if negative is None:
        negative_node = Node(10, "ConditioningZeroOut", {}, {"conditioning": (9, 0)}, title="Negative")
    else:
        negative_node = Node(10, "CLIPTextEncode", {"text": negative}, {"clip": sources["clip"]}, title="Negative")
    size = {"width": resolution, "height": resolution, "batch_size": 1}
    model_chain, positive_chain = chains.get("model", []), chains.get("positive", [])
    settings = {"steps": 25, "cfg": 7.0, **{k: v for k, v in sampling.items() if k in KSAMPLER_SETTINGS}}
    links = {
        "model": chain(model_chain, "model", TRAINED_MODEL),
        "positive": chain(positive_chain, "conditioning", (9, 0)),
        "negative": (10, 0),
        "latent_image": (11, 0),
    }
    outputs = [
        Node(12, "KSampler", {"seed": 42, **settings}, links),
        Node(13, "VAEDecode", {}, {"samples": (12, 0), "vae": sources["vae"]}),
        Node(14, "SaveImage", {"filename_prefix": "eridiffusion/sks_dog"}, {"images": (13, 0)}),
    ]
    inputs = [positive, negative_node, *positive_chain, Node(11, latent, size)]
    return [inputs, [*model_chain, *outputs]]


def chain(nodes, socket, source):
    """Link `nodes` one after the other through their input `socket`, the first to `source`; the
    link (node id, 0) of the last one's output (`source` when there is none)."""
    for node in nodes:
        node.links[socket] = source
        source = (node.id, 0)
    return source


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
