"""The canvas of a real ComfyUI page: every example workflow laid out on a grid in its groups, no
node over another at the sizes the page computes."""

import pytest

from tests.support.browser import ComfyPage
from tests.support.example_workflows import EXAMPLES, load_example

# Which group each node of an example belongs in, by type: the graph reads Model → Data → Train → Test.
GROUPS = {
    "Model": {"Note", "CheckpointLoaderSimple", "EriDiffusion_TinyDemoModel"},
    "Data": {"Note", "EriDiffusion_LoadDataset", "EriDiffusion_CacheLatents"},
    "Train": {
        "Note",
        "EriDiffusion_SampleDuringTraining",
        "EriDiffusion_LoRATrainer",
        "EriDiffusion_AdapterOptions",
        "EriDiffusion_OptimizerOptions",
        "EriDiffusion_MemoryOptions",
        "EriDiffusion_SaveLoRA",
        "EriDiffusion_LossGraph",
        "PreviewImage",
    },
    "Test": {"Note", "CLIPTextEncode", "EmptyLatentImage", "KSampler", "VAEDecode", "SaveImage"},
}
# The options nodes each example shows: the tiny demo's settings, and where small GPUs find help.
OPTIONS = {
    "sdxl_lora.json": {"EriDiffusion_OptimizerOptions", "EriDiffusion_MemoryOptions"},
    "sd15_lora.json": {"EriDiffusion_OptimizerOptions", "EriDiffusion_MemoryOptions"},
    "tiny_demo_lora.json": {"EriDiffusion_AdapterOptions", "EriDiffusion_MemoryOptions"},
}


@pytest.fixture(scope="module")
def page(browser, comfy_server):
    url, _ = comfy_server
    page = ComfyPage(browser, url, height=1200)
    yield page
    page.close()


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_example_workflow_loads_on_a_grid_of_groups_with_a_note_each_and_no_overlaps(page, example):
    workflow = load_example(example)
    page.load(workflow)
    page.fit_view()
    page.screenshot(f"canvas_{example[:-5]}.png")
    layout = page.layout()
    assert layout["problems"] == []
    assert list(layout["groups"]) == list(GROUPS)
    for title, members in layout["groups"].items():
        types = [node_type for _, node_type in members]
        assert set(types) <= GROUPS[title] and types.count("Note") == 1, (title, types)
    grouped = {node_type for members in layout["groups"].values() for _, node_type in members}
    assert {t for t in grouped if t.endswith("Options")} == OPTIONS[example]
    # the sizes the file gives are the ones the page keeps: right on first load, nothing grown
    assert page.sizes() == {node["id"]: node["size"] for node in workflow["nodes"]}
    assert page.our_errors() == []
