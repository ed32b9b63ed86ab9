// EriDiffusion in the ComfyUI page: a live panel on LoRATrainer (loss chart, step, s/step, ETA,
// learning rate, peak VRAM, samples, Stop & save) fed by the trainer's "eridiffusion.progress"
// events, the text other EriDiffusion nodes report when they finish, and the migration of nodes
// saved before their widgets moved to the options nodes.
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";
import { ComfyWidgets } from "../../scripts/widgets.js";

const TRAINER = "EriDiffusion_LoRATrainer";
const SUMMARY = "eridiffusion_summary";
// Nodes that report a line of text when they finish: the box for it is there from the start, so
// the node never grows over its neighbours after a run.
const REPORTING = new Set(["EriDiffusion_SaveLoRA", "EriDiffusion_LoadLoRAForTraining", "EriDiffusion_InspectLoRA", "EriDiffusion_ConvertLoRA", "EriDiffusion_ResizeLoRA", "EriDiffusion_MergeLoRAs", "EriDiffusion_MergeLoRAIntoCheckpoint", "EriDiffusion_ExtractLoRA"]);
const SMOOTHING = 0.9;
const TRAIN_COLOR = "rgb(80,140,255)";
const VALIDATION_COLOR = "rgb(255,150,40)";

// The height LoRATrainer reserves for its live panel up front, so that nothing the panel shows
// (samples, the summary) makes the node grow over its neighbours. The panel's rows are fixed and
// the run's summary takes the rest. devkit/example_workflows.py reads this line to size
// the example workflows.
const PANEL_HEIGHT = 316;
const PANEL_ROWS = { chart: 130, stats: 32, samples: 64, buttons: 24 };

function smoothed(values) {
  const out = [];
  let avg = 0;
  values.forEach((v, i) => {
    avg = SMOOTHING * avg + (1 - SMOOTHING) * v;
    out.push(avg / (1 - SMOOTHING ** (i + 1)));
  });
  return out;
}

function formatSeconds(s) {
  if (s == null || !isFinite(s)) return "–";
  if (s < 60) return `${s.toFixed(0)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`;
}

/** A line chart of loss series over steps: each series has a label, a colour and [step, value]
 * points (null values are steps without a finite loss); `smooth` adds its running average on top
 * of a faint raw line. All series share the axes; the legend names them. */
class LossChart {
  constructor(canvas) {
    this.canvas = canvas;
    this.series = [];
    this.logScale = false;
  }

  addSeries({ label, color, smooth = false, dots = false }) {
    const series = { label, color, smooth, dots, points: [] };
    this.series.push(series);
    return series;
  }

  draw() {
    const ctx = this.canvas.getContext("2d");
    const { width, height } = this.canvas;
    ctx.clearRect(0, 0, width, height);
    const map = (v) => (this.logScale ? Math.log10(Math.max(v, 1e-12)) : v);
    const drawn = this.series.map((s) => ({ ...s, points: s.points.filter(([, v]) => v != null && isFinite(v)) }));
    const all = drawn.flatMap((s) => s.points);
    if (all.length < 2) return;
    const steps = all.map(([step]) => step);
    const values = all.map(([, v]) => map(v));
    const [x0, x1] = [Math.min(...steps), Math.max(...steps)];
    const [lo, hi] = [Math.min(...values), Math.max(...values)];
    const pad = 6;
    const top = 20; // the legend's row
    const x = (step) => pad + ((width - 2 * pad) * (step - x0)) / (x1 - x0 || 1);
    const y = (v) => height - pad - ((height - pad - top) * (map(v) - lo)) / (hi - lo || 1);
    const line = (points, color, lineWidth) => {
      ctx.strokeStyle = color;
      ctx.lineWidth = lineWidth;
      ctx.beginPath();
      points.forEach(([step, v], i) => (i ? ctx.lineTo(x(step), y(v)) : ctx.moveTo(x(step), y(v))));
      ctx.stroke();
    };
    ctx.font = "11px sans-serif";
    let legendX = pad;
    for (const s of drawn) {
      if (!s.points.length) continue;
      if (s.smooth) {
        ctx.globalAlpha = 0.4;
        line(s.points, s.color, 1);
        ctx.globalAlpha = 1;
        const average = smoothed(s.points.map(([, v]) => v));
        line(s.points.map(([step], i) => [step, average[i]]), s.color, 2);
      } else {
        line(s.points, s.color, 2);
      }
      if (s.dots) {
        ctx.fillStyle = s.color;
        for (const [step, v] of s.points) ctx.fillRect(x(step) - 2, y(v) - 2, 4, 4);
      }
      const last = s.points[s.points.length - 1][1];
      const label = `${s.label} ${last.toPrecision(4)}`;
      ctx.fillStyle = s.color;
      ctx.fillRect(legendX, pad, 8, 8);
      ctx.fillStyle = "#aaa";
      ctx.fillText(label, legendX + 11, pad + 8);
      legendX += 11 + ctx.measureText(label).width + 10;
    }
  }
}

function row(tag, height, css = "") {
  const element = document.createElement(tag);
  element.style.cssText = `flex:0 0 ${height}px;height:${height}px;overflow:hidden;${css}`;
  return element;
}

class TrainerPanel {
  constructor(node) {
    this.node = node;
    this.root = document.createElement("div");
    this.root.className = "eridiffusion-panel";
    this.root.style.cssText =
      "display:flex;flex-direction:column;gap:4px;height:100%;overflow:hidden;" +
      "box-sizing:border-box;font:12px/15px sans-serif;color:var(--input-text,#ddd)";
    this.canvas = row("canvas", PANEL_ROWS.chart, "width:100%;background:var(--comfy-input-bg,#222);border-radius:4px");
    this.canvas.width = 360;
    this.canvas.height = PANEL_ROWS.chart;
    this.canvas.onclick = () => this.toggleLogScale();
    this.chart = new LossChart(this.canvas);
    this.trainingLoss = this.chart.addSeries({ label: "loss", color: TRAIN_COLOR, smooth: true });
    // [step, loss] of each validation check (a held-out set, measured every validate_every steps)
    this.validationLoss = this.chart.addSeries({ label: "validation", color: VALIDATION_COLOR, dots: true });
    this.text = row("div", PANEL_ROWS.stats);
    this.text.className = "eridiffusion-stats";
    this.summary = document.createElement("div");
    this.summary.style.cssText = "flex:1 1 0;min-height:0;overflow-y:auto;opacity:0.8;user-select:text";
    this.summary.className = "eridiffusion-summary";
    this.samples = row("div", PANEL_ROWS.samples, "display:flex;gap:4px");
    const buttons = row("div", PANEL_ROWS.buttons, "display:flex;gap:6px");
    this.stopButton = document.createElement("button");
    this.stopButton.textContent = "Stop & save";
    this.stopButton.disabled = true;
    this.stopButton.onclick = () => this.stop();
    const logButton = document.createElement("button");
    logButton.textContent = "log scale";
    logButton.onclick = () => this.toggleLogScale();
    buttons.append(this.stopButton, logButton);
    this.root.append(this.canvas, this.text, this.summary, this.samples, buttons);
    this.text.textContent = "not started";
  }

  /** The training loss per step (null: a skipped, non-finite step). */
  get losses() {
    return this.trainingLoss.points.map(([, v]) => v);
  }

  /** [step, validation loss] of each check. */
  get validation() {
    return this.validationLoss.points;
  }

  toggleLogScale() {
    this.chart.logScale = !this.chart.logScale;
    this.chart.draw();
  }

  update(event) {
    if (event.prompt_id !== this.promptId) this.startRun(event.prompt_id);
    this.node.properties.eridiffusion_run = event.run;
    const points = this.trainingLoss.points;
    for (const loss of event.losses) points.push([points.length + 1, loss]);
    this.validationLoss.points.push(...(event.validation ?? []));
    const parts = [`step ${event.step} / ${event.total}`];
    if (event.seconds_per_step != null) parts.push(`${event.seconds_per_step.toFixed(3)} s/step`);
    parts.push(`ETA ${formatSeconds(event.eta_seconds)}`);
    if (event.lr != null) parts.push(`lr ${event.lr.toExponential(2)}`);
    if (event.peak_vram_gib != null) parts.push(`peak VRAM ${event.peak_vram_gib.toFixed(1)} GiB`);
    if (this.stopping) parts.push("stopping at the next step");
    this.text.textContent = parts.join(" · ");
    this.stopButton.disabled = this.stopping || event.step >= event.total;
    for (const sample of event.samples) this.addSample(sample);
    this.chart.draw();
  }

  /** A new run on this node (a prompt queued again): its own chart, samples and summary. */
  startRun(promptId) {
    this.promptId = promptId;
    this.stopping = false;
    for (const series of this.chart.series) series.points = [];
    this.samples.replaceChildren();
    this.summary.textContent = "";
  }

  /** The run has ended (its node has finished). */
  finish(text) {
    this.summary.textContent = text;
    this.stopButton.disabled = true;
  }

  addSample(sample) {
    const query = new URLSearchParams({ filename: sample.filename, subfolder: sample.subfolder, type: sample.type });
    const image = document.createElement("img");
    image.src = api.apiURL(`/view?${query}`);
    image.title = sample.filename;
    image.style.cssText = "flex:0 0 64px;width:64px;height:64px;object-fit:cover;cursor:zoom-in;border-radius:3px";
    image.onclick = () => window.open(image.src, "_blank");
    this.samples.prepend(image);
    while (this.samples.children.length > 8) this.samples.lastChild.remove();
  }

  async stop() {
    this.stopping = true;
    this.stopButton.disabled = true;
    const response = await api.fetchApi("/eridiffusion/stop", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ prompt_id: this.promptId, node_id: String(this.node.id) }),
    });
    if (!response.ok) {
      this.stopping = false;
      const answer = await response.json().catch(() => ({}));
      this.text.textContent += ` · ${answer.error ?? "stop refused"}`;
      return;
    }
    this.text.textContent += " · stopping at the next step";
  }

  async restore() {
    const run = this.node.properties?.eridiffusion_run;
    if (!run || this.trainingLoss.points.length) return;
    const response = await api.fetchApi(`/eridiffusion/loss?run=${encodeURIComponent(run)}`);
    if (!response.ok) return;
    const history = await response.json();
    this.trainingLoss.points = (history.loss ?? []).map((v, i) => [i + 1, v]);
    this.validationLoss.points = history.validation ?? [];
    for (const sample of history.samples ?? []) this.addSample(sample);
    this.text.textContent = `${this.trainingLoss.points.length} steps (${run})`;
    this.chart.draw();
  }
}

/** Grow `node` to its computed size (its reserved widgets included), never shrink it. */
function fitToContent(node) {
  const [width, height] = node.computeSize();
  if (node.size[0] < width || node.size[1] < height) {
    node.setSize([Math.max(node.size[0], width), Math.max(node.size[1], height)]);
  }
}

function summaryWidget(node) {
  let widget = node.widgets?.find((w) => w.name === SUMMARY);
  if (!widget) {
    widget = ComfyWidgets.STRING(node, SUMMARY, ["STRING", { multiline: true }], app).widget;
    widget.element.readOnly = true;
    widget.element.placeholder = "reported here after a run";
    widget.serialize = false; // a report, not a setting: keep it out of saved workflows
  }
  return widget;
}

function notify(summary, detail) {
  console.warn(`EriDiffusion: ${summary} ${detail}`);
  app.extensionManager.toast.add({ severity: "warn", summary: `EriDiffusion: ${summary}`, detail });
}

// ---- Workflows saved before widgets moved to options nodes (issues 12 and 45) ----

// Every widget order each EriDiffusion node was released with, oldest first ({node type: [[name, ...],
// ...]}): a saved node's widgets_values are in one of them, told apart by their count and the types of
// the values (tests/nodes/test_widget_order.py checks that they can be).
const RELEASED_ORDERS = fetch(new URL("./widget_orders.json", import.meta.url)).then((response) => response.json());

// The node definitions of EriDiffusion's nodes, as the server sent them.
const definitions = new Map();
const WIDGET_TYPES = { INT: "number", FLOAT: "number", BOOLEAN: "boolean", STRING: "string", COMBO: "string" };

/** The type a saved value of a widget input `spec` has ("string" for a combo); undefined for a socket. */
function valueType(spec) {
  return Array.isArray(spec[0]) ? "string" : WIDGET_TYPES[spec[0]];
}

function inputsOf(type) {
  const input = definitions.get(type)?.input ?? {};
  return { ...(input.required ?? {}), ...(input.optional ?? {}) };
}

/** {input: {type, socket, spec}}: the node types that hold inputs for a node of `nodeType` now, and the
 * input of it they link to: a node of one output, the type of one of its optional inputs, that needs no
 * other socket (the options nodes, TrainingObjective). */
function holdersOf(nodeType) {
  const sockets = Object.entries(definitions.get(nodeType)?.input?.optional ?? {});
  const holders = {};
  for (const [type, definition] of definitions) {
    const socket = sockets.find(([, spec]) => definition.output?.length === 1 && spec[0] === definition.output[0]);
    const required = Object.values(definition.input?.required ?? {});
    if (!socket || required.some((spec) => valueType(spec) === undefined)) continue;
    for (const [name, spec] of Object.entries(inputsOf(type))) holders[name] = { type, socket: socket[0], spec };
  }
  return holders;
}

/** Whether saved `values` have the types of the widgets `names` (of `specs`) in order. */
function fits(values, names, specs) {
  return values.every((value, i) => {
    const spec = specs[names[i]];
    return spec !== undefined && valueType(spec) === typeof value;
  });
}

/** The default of a widget input `spec` of a node definition. */
function defaultOf(spec) {
  const [type, options = {}] = spec;
  if ("default" in options) return options.default;
  return (Array.isArray(type) ? type : options.options ?? [])[0];
}

/** Why `value` does not fit `widget`, or null. */
function refusal(widget, value) {
  const values = widget.options?.values;
  if (widget.type === "combo" && Array.isArray(values) && !values.includes(value)) {
    return `${JSON.stringify(value)} is not one of ${values.join(", ")}`;
  }
  if (widget.type === "toggle" && typeof value !== "boolean") return `${JSON.stringify(value)} is not true/false`;
  if (widget.type === "number") {
    if (typeof value !== "number" || !isFinite(value)) return `${JSON.stringify(value)} is not a number`;
    const { min, max } = widget.options ?? {};
    if ((min != null && value < min) || (max != null && value > max)) return `${value} is outside ${min}…${max}`;
  }
  return null;
}

function overlaps(a, b) {
  return a[0] < b[0] + b[2] && b[0] < a[0] + a[2] && a[1] < b[1] + b[3] && b[1] < a[1] + a[3];
}

/** [x, y, width, height] of a node with its title bar, measured now (getBounding() is the box of
 * the last frame drawn). */
function boxOf(node) {
  const box = [0, 0, 0, 0];
  node.measure(box);
  return box;
}

/** A position for `node` beside `anchor` (left, then right of it, going down) where its box meets
 * no other node's; below the whole graph when there is none. */
function freeSpotBeside(anchor, node) {
  const gap = 30;
  const others = anchor.graph._nodes.filter((n) => n !== node).map(boxOf);
  const [w, h] = node.size;
  const title = LiteGraph.NODE_TITLE_HEIGHT;
  const box = (x, y) => [x - gap / 2, y - title - gap / 2, w + gap, h + title + gap];
  for (const x of [anchor.pos[0] - w - gap, anchor.pos[0] + anchor.size[0] + gap]) {
    for (let y = anchor.pos[1]; y < anchor.pos[1] + 3000; y += 20) {
      if (!others.some((other) => overlaps(box(x, y), other))) return [x, y];
    }
  }
  return [anchor.pos[0], Math.max(...others.map((b) => b[1] + b[3])) + title + gap];
}

/** The node of type `type` that `node`'s input `socket` is linked from; one made and linked (placed
 * beside `node`) when there is none. `made` ({type: node}) keeps those made by this migration. */
function holderNode(node, type, socket, made) {
  if (made.has(type)) return made.get(type);
  const holder = LiteGraph.createNode(type);
  node.graph.add(holder);
  holder.pos = freeSpotBeside(node, holder);
  holder.connect(0, node, node.findInputSlot(socket));
  made.set(type, holder);
  return holder;
}

function linkOf(graph, id) {
  return graph.links instanceof Map ? graph.links.get(id) : graph.links[id];
}

/** Put `node`'s saved widget values (`values`, in the order `names`) where their widgets live now: its
 * own widgets, and options nodes (made, set and linked to it) for moved widgets whose value is not the
 * default, so the run is the one that was saved; its links into inputs that moved go to those nodes'
 * inputs. Returns the problems: what it could not carry over, which keeps its default. */
function migrateNode(node, names, values) {
  const problems = [];
  const holders = holdersOf(node.type);
  const made = new Map(); // node type → options node
  const pending = new Map(); // node type → [[widget name, value], ...] not at their defaults
  if (names) resetToDefaults(node); // the page has put the old values into its widgets by position
  (names ?? []).forEach((name, i) => {
    const value = values[i];
    let widget = node.widgets.find((w) => w.name === name && w.serialize !== false);
    if (!widget && holders[name]) {
      const probe = LiteGraph.createNode(holders[name].type);
      widget = probe.widgets.find((w) => w.name === name);
      const why = widget && refusal(widget, value);
      if (why) problems.push(`${name}: ${why}`);
      else if (widget && widget.value !== value) {
        pending.set(holders[name].type, [...(pending.get(holders[name].type) ?? []), [name, value]]);
      }
      return;
    }
    if (!widget) {
      problems.push(`${name} (no node holds it any more)`);
      return;
    }
    const why = refusal(widget, value);
    if (why) problems.push(`${name}: ${why}`);
    else widget.value = value;
  });
  for (const [type, settings] of pending) {
    const holder = holderNode(node, type, holders[settings[0][0]].socket, made);
    for (const [name, value] of settings) holder.widgets.find((w) => w.name === name).value = value;
  }
  moveLinks(node, holders, made);
  fitToContent(node);
  // Nodes 2.0 measures its nodes only once it has drawn them, taller than the sizes known now:
  // the new nodes are placed again at the sizes drawn.
  if (!made.size) return problems;
  afterSizesSettle(node.graph, () => {
    for (const holder of made.values()) holder.pos = freeSpotBeside(node, holder);
    node.graph.setDirtyCanvas(true, true);
  });
  return problems;
}

/** Move the links into `node`'s sockets that moved to options nodes (`holders`) onto those nodes' inputs,
 * and drop the sockets. */
function moveLinks(node, holders, made) {
  const own = inputsOf(node.type);
  for (let slot = (node.inputs ?? []).length - 1; slot >= 0; slot--) {
    const input = node.inputs[slot];
    const held = holders[input.name];
    if (input.name in own || !held || valueType(held.spec) !== undefined) continue; // not a moved socket
    const link = input.link != null ? linkOf(node.graph, input.link) : null;
    if (link) {
      const holder = holderNode(node, held.type, held.socket, made);
      node.disconnectInput(slot);
      node.graph.getNodeById(link.origin_id).connect(link.origin_slot, holder, holder.findInputSlot(input.name));
    }
    node.removeInput(slot);
  }
}

/** Call `then` once the graph's node sizes have stayed the same for three frames (at most `frames`
 * frames on). */
function afterSizesSettle(graph, then, frames = 120) {
  let last = "";
  let steady = 0;
  const check = (left) => {
    const now = JSON.stringify(graph._nodes.map((n) => [n.size[0], n.size[1]]));
    steady = now === last ? steady + 1 : 0;
    last = now;
    if (steady >= 3 || left === 0) then();
    else requestAnimationFrame(() => check(left - 1));
  };
  requestAnimationFrame(() => check(frames));
}

/** Set the node's own widgets to their defaults. */
function resetToDefaults(node) {
  const specs = inputsOf(node.type);
  for (const widget of node.widgets ?? []) if (widget.name in specs) widget.value = defaultOf(specs[widget.name]);
}

/** {names, values} of `node`'s saved `values` in an older released order (of `orders`): null when they
 * are in its widgets' order of today (none to migrate), undefined when no order fits. */
function savedLayout(node, values, orders) {
  const own = node.widgets.filter((w) => w.serialize !== false).map((w) => w.name);
  const specs = { ...Object.fromEntries(Object.entries(holdersOf(node.type)).map(([k, v]) => [k, v.spec])) };
  Object.assign(specs, inputsOf(node.type));
  const candidates = [values];
  // pages of earlier versions saved the trainer panel's empty value after the settings
  if (node.type === TRAINER && (values.at(-1) === "" || values.at(-1) == null)) candidates.unshift(values.slice(0, -1));
  for (const saved of candidates) {
    if (saved.length <= own.length && fits(saved, own, specs)) return null;
  }
  for (const saved of candidates) {
    const names = [...orders].reverse().find((order) => order.length === saved.length && fits(saved, order, specs));
    if (names) return { names, values: saved };
  }
  return values.length > own.length ? undefined : null;
}

async function migrateSavedNodes(graph) {
  const saved = graph._nodes.filter((n) => n.eridiffusionSaved);
  if (!saved.length) return;
  let released = {};
  try {
    released = await RELEASED_ORDERS;
  } catch (error) {
    notify("saved workflows cannot be migrated", `widget_orders.json did not load (${error}).`);
  }
  for (const node of saved) {
    const values = node.eridiffusionSaved;
    delete node.eridiffusionSaved;
    const layout = savedLayout(node, values, released[node.type] ?? []);
    if (layout === undefined && node.type === TRAINER) resetToDefaults(node);
    if (layout === undefined) {
      notify(
        `${node.title} #${node.id} could not be migrated`,
        `It holds ${values.length} saved settings, a layout this version does not know, so its settings are ` +
          `${node.type === TRAINER ? "back at their defaults" : "as the page placed them"}: set them (and the ` +
          "options nodes) before queueing.",
      );
      continue;
    }
    const problems = migrateNode(node, layout?.names, layout?.values);
    if (problems.length) {
      notify(
        `${node.title} #${node.id}: some settings could not be migrated`,
        `These keep their defaults: ${problems.join("; ")}. Set them before queueing.`,
      );
    }
  }
  graph.setDirtyCanvas(true, true);
}

// Nodes 2.0 (Vue nodes) sizes a DOM widget by its content, not by getMinHeight: the panel takes the
// same reserved height there as on the classic canvas.
function reservePanelRoom() {
  const style = document.createElement("style");
  style.textContent = `.lg-node .eridiffusion-panel { height: ${PANEL_HEIGHT}px; }`;
  document.head.append(style);
}

app.registerExtension({
  name: "EriDiffusion.Nodes",
  async setup() {
    reservePanelRoom();
    api.addEventListener("eridiffusion.progress", ({ detail }) => {
      const node = app.graph.getNodeById(Number(detail.node));
      node?.eridiffusionPanel?.update(detail);
    });
  },
  async afterConfigureGraph() {
    await migrateSavedNodes(app.graph);
  },
  async beforeRegisterNodeDef(nodeType, nodeData) {
    if (!nodeData.name.startsWith("EriDiffusion_")) return;
    definitions.set(nodeData.name, nodeData);
    const trainer = nodeData.name === TRAINER;
    const onNodeCreated = nodeType.prototype.onNodeCreated;
    nodeType.prototype.onNodeCreated = function () {
      onNodeCreated?.apply(this, arguments);
      if (trainer) {
        this.eridiffusionPanel = new TrainerPanel(this);
        const panel = this.addDOMWidget("eridiffusion_live", "eridiffusion_live", this.eridiffusionPanel.root, {
          serialize: false,
          getMinHeight: () => PANEL_HEIGHT,
          getMaxHeight: () => PANEL_HEIGHT,
        });
        panel.serialize = false; // what the page reads when it saves and loads widgets_values
      }
      if (REPORTING.has(nodeData.name)) summaryWidget(this);
      fitToContent(this);
    };
    const onConfigure = nodeType.prototype.onConfigure;
    nodeType.prototype.onConfigure = function (info) {
      onConfigure?.apply(this, arguments);
      // The saved values, which the page has put into the widgets by position: once the whole graph
      // is there, the migration puts those of an older layout where they belong.
      if (Array.isArray(info.widgets_values)) this.eridiffusionSaved = info.widgets_values.slice();
      if (trainer) this.eridiffusionPanel?.restore();
      fitToContent(this);
    };
    const onExecuted = nodeType.prototype.onExecuted;
    nodeType.prototype.onExecuted = function (message) {
      onExecuted?.apply(this, arguments);
      const text = message?.text?.join("\n");
      if (!text) return;
      if (this.eridiffusionPanel) this.eridiffusionPanel.finish(text);
      else summaryWidget(this).value = text;
      fitToContent(this);
      this.setDirtyCanvas(true, true);
    };
  },
});
