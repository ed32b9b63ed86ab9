"""A ComfyUI page in headless Chromium for the browser tests (tests/web): loading workflows as the
page's Open does, its console errors, and what the canvas shows, read through the page's graph:
node boxes, groups, the trainer's live panel on screen."""

import json
import os
import shutil
import urllib.request
from importlib import metadata

from devkit.paths import ROOT

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = os.path.join(ROOT, "test-artifacts")


def ours(message, server_url):
    """Errors EriDiffusion is answerable for: from its script, its routes or its nodes. The offline
    frontend's own (its registry lookups at api.comfy.org, which this machine cannot reach, and
    404s of optional userdata files) are kept in the artifacts, not asserted on."""
    offline_lookup = "ERR_NAME_NOT_RESOLVED" in message and server_url not in message
    return "eridiffusion" in message.lower() and not offline_lookup


# The page's node renderers: the classic LiteGraph canvas, and Nodes 2.0 (Vue nodes), which frontend
# 1.45 (ComfyUI 0.28) has behind the setting below; older frontends are tested on the classic one.
RENDERER_SETTING = "Comfy.VueNodes.Enabled"
NODES_2_FROM = (1, 45)


def renderers():
    """The renderers this host's frontend has: ("classic",) or ("classic", "nodes2")."""
    version = tuple(int(part) for part in metadata.version("comfyui-frontend-package").split(".")[:2])
    return ("classic", "nodes2") if version >= NODES_2_FROM else ("classic",)


def use_renderer(url, renderer):
    """Set the server's user setting for `renderer`, as the settings dialog does: pages opened after
    it draw nodes that way."""
    body = json.dumps(renderer == "nodes2").encode()
    request = urllib.request.Request(f"{url}/settings/{RENDERER_SETTING}", data=body, method="POST")
    urllib.request.urlopen(request, timeout=10).close()


class ComfyPage:
    """A ComfyUI page of the test server drawn by `renderer`, with the console errors it logged."""

    def __init__(self, browser, url, height=2200, renderer="classic"):
        self.url, self.renderer = url, renderer
        use_renderer(url, renderer)
        self.page = browser.new_page(viewport={"width": 1600, "height": height})
        self.errors = []
        self.page.on(
            "console",
            lambda m: self.errors.append(f"{m.text} {m.location.get('url', '')}") if m.type == "error" else None,
        )
        self.page.on("pageerror", lambda e: self.errors.append(f"{e} {e.stack}"))
        self.page.goto(url)
        self.page.wait_for_function("window.app && window.app.graph", timeout=120_000)

    def load(self, workflow):
        """Load a UI-format workflow as the page's "Open" does, and wait until the page has drawn it
        (the frontend sets its view on the next frames). A fresh page may still be restoring its
        default workflow, which then lands beside or over this one: the load is repeated until the
        page holds this workflow's nodes, and besides them only nodes of ours (a migration adds some)."""
        expected = {(node["id"], node["type"]) for node in workflow["nodes"]}
        for _ in range(3):
            self.page.evaluate("workflow => window.app.loadGraphData(workflow)", workflow)
            self.settle()
            shown = {tuple(n) for n in self.page.evaluate("() => window.app.graph._nodes.map((n) => [n.id, n.type])")}
            if expected <= shown and all(t.startswith("EriDiffusion_") for _, t in shown - expected):
                return
        raise AssertionError(f"the page shows nodes {sorted(shown)} after loading a workflow of {sorted(expected)}")

    def settle(self):
        """Wait until the page has drawn the graph: the next frames, and under Nodes 2.0 a DOM box for
        every node, measured (their sizes then stop changing)."""
        self.page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        if self.page.evaluate(f"() => window.app.extensionManager.setting.get('{RENDERER_SETTING}')"):
            self.page.wait_for_function(DRAWN_AS_DOM, timeout=60_000)
            self.page.wait_for_function(SIZES_STEADY, polling=100, timeout=10_000)

    def switch_renderer(self, renderer):
        """Switch the open page to `renderer`, as a user does in the settings with a workflow open."""
        self.renderer = renderer
        self.page.evaluate(
            f"(on) => window.app.extensionManager.setting.set('{RENDERER_SETTING}', on)", renderer == "nodes2"
        )
        self.settle()

    def layout(self):
        """CANVAS_LAYOUT of the page's graph: {"problems": [...], "groups": {title: [[id, type], ...]}}."""
        return self.page.evaluate(CANVAS_LAYOUT)

    def sizes(self):
        """{node id: [width, height]} of the page's graph."""
        return {
            int(k): v
            for k, v in self.page.evaluate(
                "() => Object.fromEntries(window.app.graph._nodes.map((n) => [n.id, Array.from(n.size)]))"
            ).items()
        }

    def panel_on_screen(self, node_id):
        return self.page.evaluate(PANEL_ON_SCREEN, node_id)

    def fit_view(self):
        """Zoom the canvas out to show every node and group (with room for the page's side bar)."""
        self.page.evaluate(
            """() => {
              const graph = window.app.graph;
              const boxes = [...graph._nodes.map((n) => { const b = [0, 0, 0, 0]; n.measure(b); return b; }),
                             ...graph._groups.map((g) => Array.from(g._bounding))];
              const x0 = Math.min(...boxes.map((b) => b[0])) - 120, y0 = Math.min(...boxes.map((b) => b[1])) - 80;
              const x1 = Math.max(...boxes.map((b) => b[0] + b[2])) + 40;
              const y1 = Math.max(...boxes.map((b) => b[1] + b[3])) + 40;
              window.app.canvas.ds.fitToBounds([x0, y0, x1 - x0, y1 - y0], { zoom: 1 });
              window.app.canvas.setDirty(true, true);
            }"""
        )
        self.page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")

    def show_node(self, node_id):
        """Centre the canvas on a node at 100 %, as a user looking at it would."""
        self.page.evaluate(
            """(id) => { const canvas = window.app.canvas; canvas.ds.scale = 1;
                         canvas.centerOnNode(window.app.graph.getNodeById(id)); canvas.setDirty(true, true); }""",
            node_id,
        )
        self.page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")

    def screenshot(self, name):
        self.page.screenshot(path=os.path.join(ARTIFACTS, name))

    def our_errors(self):
        return [e for e in self.errors if ours(e, self.url)]

    def close(self):
        self.page.close()


# True once every node of the graph has its Nodes 2.0 DOM box.
DRAWN_AS_DOM = """() => {
  const drawn = new Set(Array.from(document.querySelectorAll('[data-node-id]'), (e) => e.getAttribute('data-node-id')));
  return window.app.graph._nodes.every((n) => drawn.has(String(n.id)));
}"""

# True once the graph's node boxes have stayed the same over three polls (Nodes 2.0 measures its DOM
# boxes over several frames after a load, and nodes placed by size move after it).
SIZES_STEADY = """() => {
  const now = JSON.stringify(window.app.graph._nodes.map((n) => [...n.pos, ...n.size]));
  const seen = (window.__eridiffusionSizes = window.__eridiffusionSizes || []);
  seen.push(now);
  return seen.length >= 3 && seen.slice(-3).every((s) => s === now) && !!(window.__eridiffusionSizes = []);
}"""

# The canvas as the page has it: {problems, groups}. Problems: nodes whose boxes (title bar
# included) overlap, nodes smaller than the size their content needs (node.computeSize()), groups
# that overlap, nodes not inside the body (below the title bar) of exactly one group, Notes whose
# text box is shorter than their text. Groups:
# {title: [[node id, node type], ...]} of the nodes inside each.
CANVAS_LAYOUT = """() => {
  const graph = window.app.graph;
  const nodes = graph._nodes;
  const groups = graph._groups;
  const box = (n) => { const b = [0, 0, 0, 0]; n.measure(b); return b; };  // as drawn, whether drawn yet or not
  const name = (n) => `#${n.id} ${n.title}`;
  const overlap = (a, b) => a[0] < b[0] + b[2] && b[0] < a[0] + a[2] && a[1] < b[1] + b[3] && b[1] < a[1] + a[3];
  const inside = (a, b) => a[0] >= b[0] && a[1] >= b[1] && a[0] + a[2] <= b[0] + b[2] && a[1] + a[3] <= b[1] + b[3];
  const body = (g) => [g._bounding[0], g._bounding[1] + g.titleHeight, g._bounding[2], g._bounding[3] - g.titleHeight];
  const problems = [];
  nodes.forEach((a, i) => nodes.slice(i + 1).forEach((b) => {
    if (overlap(box(a), box(b))) problems.push(`${name(a)} overlaps ${name(b)}`);
  }));
  for (const n of nodes) {
    const [w, h] = n.computeSize();
    if (n.size[0] < w || n.size[1] < h) {
      problems.push(`${name(n)} is ${Array.from(n.size)}, its content needs ${[w, h]}`);
    }
  }
  groups.forEach((a, i) => groups.slice(i + 1).forEach((b) => {
    const [boxA, boxB] = [Array.from(a._bounding), Array.from(b._bounding)];
    if (overlap(boxA, boxB)) problems.push(`group ${a.title} overlaps ${b.title}`);
  }));
  const members = Object.fromEntries(groups.map((g) => [g.title, []]));
  for (const n of nodes) {
    const holders = groups.filter((g) => inside(box(n), body(g)));
    if (holders.length !== 1) problems.push(`${name(n)} is inside ${holders.length} groups`);
    for (const g of holders) members[g.title].push([n.id, n.type]);
  }
  for (const n of nodes.filter((n) => n.type === "Note")) {
    const drawn = Array.from(document.querySelectorAll(`[data-node-id="${n.id}"] textarea`));
    const own = (n.widgets || []).map((w) => w.element).filter((e) => e instanceof HTMLTextAreaElement);
    const boxes = drawn.length ? drawn : own;
    for (const box of boxes.filter((b) => b.clientHeight > 0 && b.scrollHeight > b.clientHeight + 2)) {
      problems.push(`${name(n)} cuts its text (${box.scrollHeight} high in a box of ${box.clientHeight})`);
    }
  }
  for (const list of Object.values(members)) list.sort((a, b) => a[0] - b[0]);
  return { problems, groups: members };
}"""

# The screen rectangles [left, top, width, height] of a node (title bar included) and of the
# trainer's live panel on it.
PANEL_ON_SCREEN = """(id) => {
  const canvas = window.app.canvas;
  const node = window.app.graph.getNodeById(id);
  const frame = canvas.canvas.getBoundingClientRect();
  const box = [0, 0, 0, 0];
  node.measure(box);
  const [x, y, w, h] = box;
  const { scale, offset } = canvas.ds;
  const panel = node.eridiffusionPanel.root.getBoundingClientRect();
  return {
    node: [frame.left + (x + offset[0]) * scale, frame.top + (y + offset[1]) * scale, w * scale, h * scale],
    panel: [panel.left, panel.top, panel.width, panel.height],
  };
}"""


def inside(inner, outer, slack=1.0):
    """Whether screen rectangle `inner` lies within `outer` (to `slack` pixels)."""
    return (
        inner[0] >= outer[0] - slack
        and inner[1] >= outer[1] - slack
        and inner[0] + inner[2] <= outer[0] + outer[2] + slack
        and inner[1] + inner[3] <= outer[1] + outer[3] + slack
    )
