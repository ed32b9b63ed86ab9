"""Workflows users saved keep their settings: ComfyUI stores a node's widget values as a list in the
order of its widgets, so a node may only add widgets after those it had. widget_orders.json holds
each node's widget order as released (nodes added later: as they were added); the nodes of today
must list those widgets first, in that order, and every node must be in the file."""

import json
import os

import pytest

from devkit.workflow import load_extension, widget_inputs

RELEASED = os.path.join(os.path.dirname(__file__), "widget_orders.json")


@pytest.fixture(scope="module")
def node_types():
    load_extension()
    import nodes

    return sorted(name for name in nodes.NODE_CLASS_MAPPINGS if name.startswith("EriDiffusion_"))


def test_every_node_lists_its_released_widgets_first_in_their_order(node_types):
    with open(RELEASED, encoding="utf-8") as f:
        released = json.load(f)
    for node_type in node_types:
        assert node_type in released, f"add {node_type}'s widget order to {RELEASED}"
        names = [name for name, _ in widget_inputs(node_type)]
        before = released[node_type]
        assert names[: len(before)] == before, (
            f"{node_type}: a saved workflow's values would land on other widgets; add new widgets after {before[-1]}"
        )
