"""The canvas of a real ComfyUI page: every example workflow laid out on a grid in its groups, no
node over another at the sizes the page computes; a workflow saved when LoRATrainer still held all
its settings loads with them moved to the options nodes, and trains; one saved when the dataset,
cache and sample nodes held the video inputs loads with them (values and links) on the media options."""

import copy
import json
import os
import time

import pytest

from devkit.browser import ComfyPage, renderers
from devkit.example_workflows import ALL_EXAMPLES, load_example

# tiny_demo_lora.json as EriDiffusion wrote it before the options nodes (commit 918dab5): its
# LoRATrainer holds 26 settings, gradient_checkpointing off and targets all-linear among them.
OLD_WORKFLOW = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny_demo_lora_before_options_nodes.json")
# wan22_i2v_experts_lora.json as EriDiffusion wrote it before the media options nodes (issue 45): frames
# 33 on LoadDataset, start_image on CacheLatents, a start image linked into SampleDuringTraining and the
# low-noise expert into LoRATrainer.
OLD_VIDEO_WORKFLOW = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "wan22_i2v_experts_lora_before_media_options.json"
)
TRAINER = 5
# Which group each node of an example belongs in, by type: the graph reads Model → Data → Train → Test.
GROUPS = {
    "Model": {
        "Note",
        "CheckpointLoaderSimple",
        "EriDiffusion_TinyDemoModel",
        "UNETLoader",
        "CLIPLoader",
        "DualCLIPLoader",
        "VAELoader",
        "LTXAVTextEncoderLoader",
        "LTXVAudioVAELoader",
    },
    "Data": {
        "Note",
        "EriDiffusion_LoadDataset",
        "EriDiffusion_CacheLatents",
        "EriDiffusion_DatasetMediaOptions",
        "EriDiffusion_CacheMediaOptions",
    },
    "Train": {
        "Note",
        "EriDiffusion_SampleDuringTraining",
        "EriDiffusion_SampleMediaOptions",
        "EriDiffusion_TrainingObjective",
        "EriDiffusion_LoRATrainer",
        "EriDiffusion_AdapterOptions",
        "EriDiffusion_OptimizerOptions",
        "EriDiffusion_MemoryOptions",
        "EriDiffusion_SaveLoRA",
        "EriDiffusion_SaveFineTune",
        "EriDiffusion_LossGraph",
        "PreviewImage",
    },
    "Test": {"Note", "CLIPTextEncode", "EmptyLatentImage", "KSampler", "VAEDecode", "SaveImage"}
    # the model templates' own (devkit/family_examples.py)
    | {"EmptySD3LatentImage", "ModelSamplingAuraFlow", "FluxGuidance", "ConditioningZeroOut", "CFGNorm"}
    | {"EmptyFlux2LatentImage", "RandomNoise", "KSamplerSelect", "Flux2Scheduler", "CFGGuider", "SamplerCustomAdvanced"}
    | {"LoadImage", "FluxKontextImageScale", "VAEEncode", "TextEncodeQwenImageEditPlus"}
    | {"FluxKontextMultiReferenceLatentMethod"}
    | {"EmptyHunyuanLatentVideo", "ModelSamplingSD3", "KSamplerAdvanced", "CreateVideo", "SaveVideo"}
    | {"WanImageToVideo"}
    | {"LTXVConditioning", "EmptyLTXVLatentVideo", "LTXVEmptyLatentAudio", "LTXVConcatAVLatent", "LTXVScheduler"}
    | {"LTXVSeparateAVLatent", "VAEDecodeTiled", "LTXVAudioVAEDecode"}
    | {"TextEncodeAceStepAudio1.5", "EmptyAceStep1.5LatentAudio", "VAEDecodeAudio", "SaveAudioMP3"},
}
# The LoRA toolbox's example: Model → LoRA (convert, resize) → Compare (two images of one prompt).
TOOL_GROUPS = {
    "Model": {"Note", "CheckpointLoaderSimple"},
    "LoRA": {"Note", "EriDiffusion_ConvertLoRA", "EriDiffusion_ResizeLoRA"},
    "Compare": {"Note", "CLIPTextEncode", "EmptyLatentImage", "KSampler", "VAEDecode", "SaveImage"},
}
EXAMPLE_GROUPS = {"lora_tools.json": TOOL_GROUPS}
# The options nodes each example shows: the tiny demo's settings, and where small GPUs find help.
OPTIONS = {
    "sdxl_lora.json": {"EriDiffusion_OptimizerOptions", "EriDiffusion_MemoryOptions"},
    "sdxl_finetune.json": {
        "EriDiffusion_AdapterOptions",
        "EriDiffusion_OptimizerOptions",
        "EriDiffusion_MemoryOptions",
    },
    "sd15_lora.json": {"EriDiffusion_OptimizerOptions", "EriDiffusion_MemoryOptions"},
    "tiny_demo_lora.json": {"EriDiffusion_AdapterOptions", "EriDiffusion_MemoryOptions"},
    **{
        name: {"EriDiffusion_OptimizerOptions", "EriDiffusion_MemoryOptions"}
        for name in (
            "z_image_lora.json",
            "flux_dev_lora.json",
            "flux2_klein_lora.json",
            "qwen_image_edit_lora.json",
        )
    },
    # the clips' frames and the samples' (and image-to-video's start image) on the media options
    "wan22_t2v_experts_lora.json": {
        "EriDiffusion_OptimizerOptions",
        "EriDiffusion_MemoryOptions",
        "EriDiffusion_DatasetMediaOptions",
        "EriDiffusion_SampleMediaOptions",
    },
    "wan22_i2v_experts_lora.json": {
        "EriDiffusion_OptimizerOptions",
        "EriDiffusion_MemoryOptions",
        "EriDiffusion_DatasetMediaOptions",
        "EriDiffusion_CacheMediaOptions",
        "EriDiffusion_SampleMediaOptions",
    },
    # the clips' frames and their sound's audio VAE; the music's seconds
    "ltx2_sound_lora.json": {
        "EriDiffusion_OptimizerOptions",
        "EriDiffusion_MemoryOptions",
        "EriDiffusion_DatasetMediaOptions",
        "EriDiffusion_CacheMediaOptions",
        "EriDiffusion_SampleMediaOptions",
    },
    "ace_step15_lora.json": {
        "EriDiffusion_OptimizerOptions",
        "EriDiffusion_MemoryOptions",
        "EriDiffusion_DatasetMediaOptions",
        "EriDiffusion_SampleMediaOptions",
    },
    "lora_tools.json": set(),
}

# The trainer's own settings and, per linked options socket, that node's type and settings.
TRAINER_STATE = """(id) => {
  const graph = window.app.graph;
  const trainer = graph.getNodeById(id);
  const values = (node) => Object.fromEntries(
    node.widgets.filter((w) => w.serialize !== false && w.options?.serialize !== false).map((w) => [w.name, w.value]));
  const options = {};
  for (const input of trainer.inputs) {
    if (input.link == null || !input.name.endsWith("_options")) continue;
    const link = graph.links instanceof Map ? graph.links.get(input.link) : graph.links[input.link];
    const source = graph.getNodeById(link.origin_id);
    options[input.name] = { type: source.type, values: values(source) };
  }
  const saved = graph.serialize().nodes.find((n) => n.id === id);
  return { widgets: values(trainer), options, saved: saved.widgets_values };
}"""


# A node's widgets, its linked inputs (name: the node it is linked from) and the settings nodes linked
# into it (input: that node's type, widgets and linked inputs).
NODE_STATE = """(id) => {
  const graph = window.app.graph;
  const node = graph.getNodeById(id);
  const origin = (input) =>
    (graph.links instanceof Map ? graph.links.get(input.link) : graph.links[input.link]).origin_id;
  const values = (n) => Object.fromEntries(
    n.widgets.filter((w) => w.serialize !== false && w.options?.serialize !== false).map((w) => [w.name, w.value]));
  const links = (n) => Object.fromEntries(n.inputs.filter((i) => i.link != null).map((i) => [i.name, origin(i)]));
  const options = {};
  for (const input of node.inputs.filter((i) => i.link != null)) {
    const source = graph.getNodeById(origin(input));
    if (/(Options|Objective)$/.test(source.type)) {
      options[input.name] = { type: source.type, values: values(source), links: links(source) };
    }
  }
  const saved = graph.serialize().nodes.find((n) => n.id === id);
  return { widgets: values(node), inputs: node.inputs.map((i) => i.name), options, saved: saved.widgets_values };
}"""


@pytest.fixture(scope="module", params=renderers())
def page(browser, comfy_server, request):
    """The page, drawn by each of the host's node renderers in turn (all of this module's tests in one,
    then the other)."""
    url, _ = comfy_server
    page = ComfyPage(browser, url, height=1200, renderer=request.param)
    yield page
    page.close()


def old_workflow():
    with open(OLD_WORKFLOW) as f:
        return json.load(f)


@pytest.mark.parametrize("example", sorted(ALL_EXAMPLES))
def test_example_workflow_loads_on_a_grid_of_groups_with_a_note_each_and_no_overlaps(page, example):
    workflow = load_example(example)
    page.load(workflow)
    page.fit_view()
    page.screenshot(f"canvas_{example[:-5]}_{page.renderer}.png")
    layout = page.layout()
    assert layout["problems"] == []
    groups = EXAMPLE_GROUPS.get(example, GROUPS)
    assert list(layout["groups"]) == list(groups)
    for title, members in layout["groups"].items():
        types = [node_type for _, node_type in members]
        assert set(types) <= groups[title] and types.count("Note") == 1, (title, types)
    grouped = {node_type for members in layout["groups"].values() for _, node_type in members}
    assert {t for t in grouped if t.endswith("Options")} == OPTIONS[example]
    # the sizes the file gives are the ones the page keeps: right on first load, nothing grown
    assert page.sizes() == {node["id"]: node["size"] for node in workflow["nodes"]}
    assert page.our_errors() == []


def test_old_trainer_layout_moves_settings_to_linked_options_nodes_and_the_run_uses_them(page, comfy_server):
    _, base = comfy_server
    page.load(old_workflow())
    state = page.page.evaluate(TRAINER_STATE, TRAINER)
    page.show_node(TRAINER)
    page.screenshot(f"canvas_migrated_old_workflow_{page.renderer}.png")
    assert state["widgets"] == {
        "steps": 200,
        "learning_rate": 0.003,
        "algorithm": "lora",
        "rank": 8,
        "alpha": 8.0,
        "batch_size": 1,
        "seed": 0,
        "dtype": "fp32",
        "save_every": 0,
        "run_name": "sks_dog",
    }
    assert state["options"] == {
        "adapter_options": {
            "type": "EriDiffusion_AdapterOptions",
            "values": {
                "targets": "all-linear",
                "conv_rank": 0,
                "conv_alpha": 1.0,
                "lokr_factor": -1,
                "lokr_full_rank": False,
                "include": "",
                "exclude": "",
                "train_norms_and_biases": False,
                "text_encoders": "",
                "train_diffusion_model": True,
            },
        },
        "memory_options": {
            "type": "EriDiffusion_MemoryOptions",
            "values": {
                "gradient_checkpointing": False,
                "weights_vram_gib": 0.0,
                "torch_compile": False,
                "cuda_graphs": "auto",
                "fp8_compute": False,
                "device": "auto",
                "vram_budget_gib": 0.0,
                "blocks_to_swap": 0,
                "base_quantization": "none",
                "fused_backward": False,
                "fine_tune_dtype": "fp32",
                "sharding": "none",
            },
        },
    }
    assert state["saved"] == list(state["widgets"].values())  # saved again: the new layout
    # the options nodes are put where they cover nothing (the old layout's own overlaps aside)
    assert [p for p in page.layout()["problems"] if "overlaps" in p and "Options" in p] == []
    # a short run of the migrated graph, under its own names; its test image left out (muted)
    page.page.evaluate(
        """([id, renderer]) => {
          const graph = window.app.graph;
          const byType = (type) => graph._nodes.find((n) => n.type === type);
          const set = (node, name, value) => { node.widgets.find((w) => w.name === name).value = value; };
          set(graph.getNodeById(id), "steps", 4);
          set(graph.getNodeById(id), "run_name", `migrated_${renderer}`);
          set(byType("EriDiffusion_SampleDuringTraining"), "steps", 1);
          set(byType("EriDiffusion_SaveLoRA"), "filename_prefix", `eridiffusion/migrated_${renderer}`);
          for (const type of ["KSampler", "VAEDecode", "SaveImage"]) byType(type).mode = 2;
          window.eriRunDone = false;  // set when the page has had every message of the run
          window.comfyAPI.api.api.addEventListener("execution_success", () => { window.eriRunDone = true; });
          return window.app.queuePrompt(0);
        }""",
        [TRAINER, page.renderer],
    )
    summary = base / "output" / f"migrated_{page.renderer}" / "summary.json"
    deadline = time.time() + 300
    while not summary.exists() and time.time() < deadline:
        time.sleep(0.5)
    assert summary.exists(), open(base / "server.log").read()[-3000:]
    with open(summary) as f:
        run = json.load(f)
    assert run["steps"] == 4
    config = run["config"]
    assert (config["learning_rate"], config["dtype"], config["gradient_checkpointing"]) == (0.003, "fp32", False)
    assert (config["adapter"]["targets"], config["adapter"]["rank"], config["adapter"]["alpha"]) == (
        "all-linear",
        8,
        8.0,
    )
    assert page.our_errors() == []
    # the run goes on after its summary (SaveLoRA, the loss graph, the preview): its last messages reach
    # the page before the next test loads another workflow, whose node of the same id would show them
    page.page.wait_for_function("() => window.eriRunDone === true", timeout=120_000)


def test_old_trainer_settings_that_cannot_move_are_named_in_a_message(page):
    older = old_workflow()
    trainer = next(n for n in older["nodes"] if n["id"] == TRAINER)
    # the 25-setting layout (before on_nan) as the page saved it (the panel's empty value last),
    # with an optimizer this version does not have
    del trainer["widgets_values"][24]
    trainer["widgets_values"][11] = "SGD"
    trainer["widgets_values"].append("")
    page.load(older)
    page.page.wait_for_selector("text=some settings could not be migrated", timeout=10_000)
    assert "optimizer" in page.page.inner_text("body")
    state = page.page.evaluate(TRAINER_STATE, TRAINER)
    assert state["widgets"]["run_name"] == "sks_dog" and state["widgets"]["dtype"] == "fp32"
    assert set(state["options"]) == {"adapter_options", "memory_options"}  # no OptimizerOptions: AdamW stays
    unknown = copy.deepcopy(older)
    next(n for n in unknown["nodes"] if n["id"] == TRAINER)["widgets_values"] = list(range(14))
    page.load(unknown)
    page.page.wait_for_selector("text=LoRATrainer #5 could not be migrated", timeout=10_000)
    page.screenshot(f"canvas_migration_message_{page.renderer}.png")
    defaults = page.page.evaluate(
        """() => Object.fromEntries(LiteGraph.createNode("EriDiffusion_LoRATrainer").widgets
                   .filter((w) => w.serialize !== false).map((w) => [w.name, w.value]))"""
    )
    assert defaults["run_name"] == "eridiffusion_lora"
    assert page.page.evaluate(TRAINER_STATE, TRAINER)["widgets"] == defaults  # not the values by position


def test_a_video_workflow_saved_before_the_media_options_keeps_its_values_and_links_on_them(page):
    with open(OLD_VIDEO_WORKFLOW) as f:
        page.load(json.load(f))
    dataset, cache, sampler, trainer = (page.page.evaluate(NODE_STATE, node_id) for node_id in (2, 3, 4, 5))
    page.show_node(3)
    page.screenshot(f"canvas_migrated_video_workflow_{page.renderer}.png")
    assert list(dataset["widgets"].values()) == [
        "sks_dog_clips",
        ".txt",
        "sks",
        "error",
        0.0,
        False,
        1,
        1,
        0.0,
        "error",
        False,
    ]
    assert dataset["options"] == {
        "media_options": {
            "type": "EriDiffusion_DatasetMediaOptions",
            "values": {"frames": 33, "fps": 16.0, "seconds": 120.0},
            "links": {},
        }
    }
    assert cache["widgets"] == {"resolution": 512, "shuffle_variants": 4, "cache_folder": "", "extra_resolutions": ""}
    assert cache["options"]["media_options"] == {
        "type": "EriDiffusion_CacheMediaOptions",
        "values": {"inpaint": False, "edit_instructions": False, "start_image": True},
        "links": {},
    }
    assert sampler["options"]["media_options"] == {
        "type": "EriDiffusion_SampleMediaOptions",
        "values": {"frames": 33, "seconds": 10.0},
        "links": {"start_image": 38},  # the Test group's Start image
    }
    assert [v for k, v in sampler["widgets"].items() if k in ("every", "width", "height")] == [250, 512, 512]
    assert trainer["options"]["objective"]["links"] == {"low_noise_model": 33}  # the low-noise UNETLoader
    assert "low_noise_model" not in trainer["inputs"] and "start_image" not in sampler["inputs"]
    for state in (dataset, cache, sampler):
        assert state["saved"] == list(state["widgets"].values())  # saved again: the new layout
    assert page.our_errors() == []


# What the page does with a finished node's "executed" message, as the server sends it.
SHOW_TEXT = """([id, text]) => {
  window.comfyAPI.api.api.dispatchEvent(new CustomEvent("executed", {detail: {node: String(id),
      display_node: String(id), output: {text: [text]}, prompt_id: "shown"}}));
  const node = window.app.graph.getNodeById(id);
  return node.widgets.find((w) => w.name === "eridiffusion_summary").value;
}"""


def test_the_toolbox_nodes_show_what_they_did_in_the_box_they_keep_for_it(page):
    workflow = load_example("lora_tools.json")
    page.load(workflow)
    sizes = page.sizes()
    report = "wrote converted/their_lora.safetensors: 304 layers in ComfyUI's keys\n" + "\n".join(
        f"  read {n} layers named transformer.<name> (lora)" for n in range(40)
    )
    for node_id in (2, 3):  # Convert LoRA, Resize LoRA
        assert page.page.evaluate(SHOW_TEXT, [node_id, report]) == report
    page.settle()
    page.show_node(2)
    page.screenshot(f"lora_tools_reported_{page.renderer}.png")
    assert page.layout()["problems"] == []
    assert page.sizes() == sizes  # a long report scrolls in its box: nothing grows over a neighbour
