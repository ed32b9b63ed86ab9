// EriDiffusion in the ComfyUI page: a live panel on LoRATrainer (loss chart, step, s/step, ETA,
// learning rate, peak VRAM, samples, Stop & save) fed by the trainer's "eridiffusion.progress"
// events, and the text other EriDiffusion nodes report when they finish.
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";
import { ComfyWidgets } from "../../scripts/widgets.js";

const TRAINER = "EriDiffusion_LoRATrainer";
const SUMMARY = "eridiffusion_summary";
const SMOOTHING = 0.9;
const TRAIN_COLOR = "rgb(80,140,255)";
const VALIDATION_COLOR = "rgb(255,150,40)";

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
    this.validation = []; // [step, validation loss] pairs
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
    this.validation.push(...(event.validation ?? []));
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
    this.validation = history.validation ?? [];
    for (const sample of history.samples ?? []) this.addSample(sample);
    this.text.textContent = `${this.losses.length} steps (${run})`;
    this.draw();
  }

  draw() {
    const ctx = this.canvas.getContext("2d");
    const { width, height } = this.canvas;
    ctx.clearRect(0, 0, width, height);
    // [step, loss] points; a skipped (non-finite) step comes as null: it has no point on the chart
    const finite = ([, v]) => v != null && isFinite(v);
    const training = this.losses.map((v, i) => [i + 1, v]).filter(finite);
    const validation = this.validation.filter(finite);
    if (training.length < 2 && !validation.length) return;
    const map = (v) => (this.logScale ? Math.log10(Math.max(v, 1e-12)) : v);
    const values = [...training, ...validation].map(([, v]) => map(v));
    const lo = Math.min(...values);
    const hi = Math.max(...values);
    const span = hi - lo || 1;
    const lastStep = Math.max(this.losses.length, ...validation.map(([step]) => step), 2);
    const pad = 6;
    const point = (step, v) => [pad + ((width - 2 * pad) * (step - 1)) / (lastStep - 1),
                                height - pad - ((height - 2 * pad) * (map(v) - lo)) / span];
    const line = (points, color, widthPx) => {
      ctx.strokeStyle = color;
      ctx.lineWidth = widthPx;
      ctx.beginPath();
      points.forEach(([step, v], i) => { const [x, y] = point(step, v); i ? ctx.lineTo(x, y) : ctx.moveTo(x, y); });
      ctx.stroke();
    };
    line(training, "rgba(120,150,220,0.45)", 1);
    const trend = smoothed(training.map(([, v]) => v));
    line(training.map(([step], i) => [step, trend[i]]), TRAIN_COLOR, 2);
    if (validation.length) {
      line(validation, VALIDATION_COLOR, 2);
      ctx.fillStyle = VALIDATION_COLOR;
      for (const [step, v] of validation) {
        const [x, y] = point(step, v);
        ctx.fillRect(x - 2, y - 2, 4, 4);
      }
      // legend, bottom left (the curves start high on the left): which line is which
      ctx.fillStyle = TRAIN_COLOR;
      ctx.fillRect(pad, height - 26, 10, 3);
      ctx.fillStyle = VALIDATION_COLOR;
      ctx.fillRect(pad, height - 14, 10, 3);
      ctx.fillStyle = "#aaa";
      ctx.fillText("training", pad + 14, height - 21);
      ctx.fillText("validation", pad + 14, height - 9);
    }
    ctx.fillStyle = "#aaa";
    if (training.length) ctx.fillText(training[training.length - 1][1].toPrecision(4), width - 60, 12);
    if (validation.length) {
      ctx.fillStyle = VALIDATION_COLOR;
      ctx.fillText(validation[validation.length - 1][1].toPrecision(4), width - 60, 24);
    }
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
