"""Workflows users saved keep their settings. ComfyUI stores a node's widget values as a list in the
order of its widgets; web/widget_orders.json holds every order each node was released with, oldest
first, and the page's migration (web/eridiffusion.js) reads it. A node's newest order must be the start
of its widgets today (new widgets go last). An older order that is not is one the page migrates: each
of its widgets must be the node's own or an input of an options node that links into it, and the page
must tell it from the node's widgets today (and from the other migrated orders) by count or by the
types of the values."""

import json
import os

import pytest

from devkit.paths import ROOT
from devkit.workflow import is_widget, load_extension, widget_inputs

RELEASED = os.path.join(ROOT, "web", "widget_orders.json")
# a saved value's type in the page, by widget type (what the migration's fits() compares)
VALUE_TYPES = {"INT": "number", "FLOAT": "number", "BOOLEAN": "boolean", "STRING": "string"}


@pytest.fixture(scope="module")
def node_types():
    load_extension()
    import nodes

    return sorted(name for name in nodes.NODE_CLASS_MAPPINGS if name.startswith("EriDiffusion_"))


@pytest.fixture(scope="module")
def released():
    with open(RELEASED, encoding="utf-8") as f:
        return json.load(f)


def inputs_of(node_type):
    import nodes

    definition = nodes.NODE_CLASS_MAPPINGS[node_type].INPUT_TYPES()
    return definition.get("required", {}), definition.get("optional", {})


def holders(node_type, node_types):
    """{input name: spec} of the nodes that can link into `node_type`'s optional sockets and need no
    other socket (options nodes, TrainingObjective), as the page finds them."""
    import nodes

    sockets = {spec[0] for spec in inputs_of(node_type)[1].values() if not is_widget(spec)}
    held = {}
    for other in node_types:
        required, optional = inputs_of(other)
        outputs = nodes.NODE_CLASS_MAPPINGS[other].RETURN_TYPES
        if len(outputs) == 1 and outputs[0] in sockets and all(is_widget(s) for s in required.values()):
            held.update({**required, **optional})
    return held


def value_type(spec):
    return "string" if isinstance(spec[0], list) else VALUE_TYPES.get(spec[0], spec[0])


def test_every_node_lists_its_newest_released_widgets_first_in_their_order(node_types, released):
    for node_type in node_types:
        assert node_type in released, f"add {node_type}'s widget order to {RELEASED}"
        names = [name for name, _ in widget_inputs(node_type)]
        newest = released[node_type][-1]
        assert names[: len(newest)] == newest, (
            f"{node_type}: a saved workflow's values would land on other widgets; add new widgets after "
            f"{newest[-1] if newest else 'none'}, or record the new order in {RELEASED} with a migration"
        )


def test_every_widget_of_an_older_order_has_a_node_the_page_moves_its_value_to(node_types, released):
    for node_type in node_types:
        own = {**inputs_of(node_type)[0], **inputs_of(node_type)[1]}
        held = holders(node_type, node_types)
        for order in released[node_type]:
            lost = [name for name in order if name not in own and name not in held]
            assert not lost, f"{node_type}: a workflow saved with {order} would lose {lost}"


def test_the_page_tells_each_migrated_order_from_the_widgets_of_today_and_from_each_other(node_types, released):
    for node_type in node_types:
        specs = {**holders(node_type, node_types), **dict(widget_inputs(node_type))}
        today = [name for name, _ in widget_inputs(node_type)]
        migrated = [order for order in released[node_type] if order != today[: len(order)]]
        layouts = [today[:n] for n in range(len(today) + 1)] + migrated
        for order in migrated:
            types = [value_type(specs[name]) for name in order]
            alike = [other for other in layouts if other is not order and len(other) == len(order)]
            for other in alike:
                assert [value_type(specs[name]) for name in other] != types, (
                    f"{node_type}: saved values in the order {order} look like those of {other}"
                )
