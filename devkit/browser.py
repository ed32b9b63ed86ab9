"""A ComfyUI page in headless Chromium for the browser tests (tests/web): loading workflows as the
page's Open does, its console errors, and what the canvas shows, read through the page's graph:
node boxes, groups, the trainer's live panel on screen."""

import os
import shutil

from devkit.paths import ROOT

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = os.path.join(ROOT, "test-artifacts")


def ours(message, server_url):
    """Errors EriDiffusion is answerable for: from its script, its routes or its nodes. The offline
    frontend's own (its registry lookups at api.comfy.org, which this machine cannot reach, and
    404s of optional userdata files) are kept in the artifacts, not asserted on."""
    offline_lookup = "ERR_NAME_NOT_RESOLVED" in message and server_url not in message
    return "eridiffusion" in message.lower() and not offline_lookup


class ComfyPage:
    """A ComfyUI page of the test server, with the console errors it logged."""

    def __init__(self, browser, url, height=2200):
        self.url = url
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
        (the frontend sets its view on the next frames)."""
        self.page.evaluate("workflow => window.app.loadGraphData(workflow)", workflow)
        self.page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")

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


# The canvas as the page has it: {problems, groups}. Problems: nodes whose boxes (title bar
# included) overlap, nodes smaller than the size their content needs (node.computeSize()), groups
# that overlap, nodes not inside the body (below the title bar) of exactly one group. Groups:
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
