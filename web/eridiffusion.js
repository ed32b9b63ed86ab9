// EriDiffusion in the ComfyUI page: a live panel on LoRATrainer (loss chart, step, s/step, ETA,
// learning rate, peak VRAM, samples, Stop & save) fed by the trainer's "eridiffusion.progress"
// events, and the text other EriDiffusion nodes report when they finish.
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";
import { ComfyWidgets } from "../../scripts/widgets.js";

const TRAINER = "EriDiffusion_LoRATrainer";
const SUMMARY = "eridiffusion_summary";
const SMOOTHING = 0.9;

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

class TrainerPanel {
  constructor(node) {
    this.node = node;
    this.losses = [];
    this.logScale = false;
    this.root = document.createElement("div");
    this.root.style.cssText = "display:flex;flex-direction:column;gap:4px;font:12px sans-serif;color:var(--input-text,#ddd)";
    this.canvas = document.createElement("canvas");
    this.canvas.width = 360;
    this.canvas.height = 140;
    this.canvas.style.cssText = "width:100%;height:140px;background:var(--comfy-input-bg,#222);border-radius:4px";
    this.text = document.createElement("div");
    this.text.className = "eridiffusion-stats";
    this.samples = document.createElement("div");
    this.samples.style.cssText = "display:flex;gap:4px;flex-wrap:wrap";
    const buttons = document.createElement("div");
    buttons.style.cssText = "display:flex;gap:6px";
    this.stopButton = document.createElement("button");
    this.stopButton.textContent = "Stop & save";
    this.stopButton.disabled = true;
    this.stopButton.onclick = () => this.stop();
    const logButton = document.createElement("button");
    logButton.textContent = "log scale";
    logButton.onclick = () => { this.logScale = !this.logScale; this.draw(); };
    buttons.append(this.stopButton, logButton);
    this.root.append(this.canvas, this.text, this.samples, buttons);
    this.text.textContent = "not started";
  }

  update(event) {
    this.promptId = event.prompt_id;
    this.node.properties.eridiffusion_run = event.run;
    this.losses.push(...event.losses);
    const parts = [`step ${event.step} / ${event.total}`];
    if (event.seconds_per_step != null) parts.push(`${event.seconds_per_step.toFixed(3)} s/step`);
    parts.push(`ETA ${formatSeconds(event.eta_seconds)}`);
    if (event.lr != null) parts.push(`lr ${event.lr.toExponential(2)}`);
    if (event.peak_vram_gib != null) parts.push(`peak VRAM ${event.peak_vram_gib.toFixed(1)} GiB`);
    this.text.textContent = parts.join(" · ");
    this.stopButton.disabled = event.step >= event.total;
    for (const sample of event.samples) this.addSample(sample);
    this.draw();
  }

  addSample(sample) {
    const query = new URLSearchParams({ filename: sample.filename, subfolder: sample.subfolder, type: sample.type });
    const image = document.createElement("img");
    image.src = api.apiURL(`/view?${query}`);
    image.title = sample.filename;
    image.style.cssText = "width:64px;height:64px;object-fit:cover;cursor:zoom-in;border-radius:3px";
    image.onclick = () => window.open(image.src, "_blank");
    this.samples.prepend(image);
    while (this.samples.children.length > 8) this.samples.lastChild.remove();
  }

  async stop() {
    this.stopButton.disabled = true;
    const response = await api.fetchApi("/eridiffusion/stop", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ prompt_id: this.promptId, node_id: String(this.node.id) }),
    });
    if (!response.ok) {
      const answer = await response.json().catch(() => ({}));
      this.text.textContent += ` · ${answer.error ?? "stop refused"}`;
      return;
    }
    this.text.textContent += " · stopping at the next step";
  }

  async restore() {
    const run = this.node.properties?.eridiffusion_run;
    if (!run || this.losses.length) return;
    const response = await api.fetchApi(`/eridiffusion/loss?run=${encodeURIComponent(run)}`);
    if (!response.ok) return;
    const history = await response.json();
    this.losses = history.loss ?? [];
    for (const sample of history.samples ?? []) this.addSample(sample);
    this.text.textContent = `${this.losses.length} steps (${run})`;
    this.draw();
  }

  draw() {
    const ctx = this.canvas.getContext("2d");
    const { width, height } = this.canvas;
    ctx.clearRect(0, 0, width, height);
    // a skipped (non-finite) step comes as null: it has no point on the chart
    const losses = this.losses.filter((v) => v != null && isFinite(v));
    if (losses.length < 2) return;
    const map = (v) => (this.logScale ? Math.log10(Math.max(v, 1e-12)) : v);
    const values = losses.map(map);
    const lo = Math.min(...values);
    const hi = Math.max(...values);
    const span = hi - lo || 1;
    const pad = 6;
    const point = (i, v) => [pad + ((width - 2 * pad) * i) / (values.length - 1),
                             height - pad - ((height - 2 * pad) * (v - lo)) / span];
    const line = (series, color, widthPx) => {
      ctx.strokeStyle = color;
      ctx.lineWidth = widthPx;
      ctx.beginPath();
      series.forEach((v, i) => { const [x, y] = point(i, v); i ? ctx.lineTo(x, y) : ctx.moveTo(x, y); });
      ctx.stroke();
    };
    line(values, "rgba(120,150,220,0.45)", 1);
    line(smoothed(losses).map(map), "rgb(80,140,255)", 2);
    ctx.fillStyle = "#aaa";
    ctx.fillText(losses[losses.length - 1].toPrecision(4), width - 60, 12);
  }
}

app.registerExtension({
  name: "EriDiffusion.Nodes",
  async setup() {
    api.addEventListener("eridiffusion.progress", ({ detail }) => {
      const node = app.graph.getNodeById(Number(detail.node));
      node?.eridiffusionPanel?.update(detail);
    });
  },
  async beforeRegisterNodeDef(nodeType, nodeData) {
    if (!nodeData.name.startsWith("EriDiffusion_")) return;
    if (nodeData.name === TRAINER) {
      const onNodeCreated = nodeType.prototype.onNodeCreated;
      nodeType.prototype.onNodeCreated = function () {
        onNodeCreated?.apply(this, arguments);
        this.eridiffusionPanel = new TrainerPanel(this);
        this.addDOMWidget("eridiffusion_live", "eridiffusion_live", this.eridiffusionPanel.root, { serialize: false });
      };
      const onConfigure = nodeType.prototype.onConfigure;
      nodeType.prototype.onConfigure = function () {
        onConfigure?.apply(this, arguments);
        this.eridiffusionPanel?.restore();
      };
    }
    const onExecuted = nodeType.prototype.onExecuted;
    nodeType.prototype.onExecuted = function (message) {
      onExecuted?.apply(this, arguments);
      const text = message?.text?.join("\n");
      if (!text) return;
      let widget = this.widgets?.find((w) => w.name === SUMMARY);
      if (!widget) {
        widget = ComfyWidgets.STRING(this, SUMMARY, ["STRING", { multiline: true }], app).widget;
        widget.inputEl.readOnly = true;
        widget.serialize = false; // a report, not a setting: keep it out of saved workflows
      }
      widget.value = text;
      this.setDirtyCanvas(true, true);
    };
  },
});
