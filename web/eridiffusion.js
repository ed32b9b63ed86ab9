// Shows the text a finished EriDiffusion node reports (training summary, saved file) on the node itself.
import { app } from "../../scripts/app.js";
import { ComfyWidgets } from "../../scripts/widgets.js";

const SUMMARY = "eridiffusion_summary";

app.registerExtension({
  name: "EriDiffusion.NodeSummary",
  async beforeRegisterNodeDef(nodeType, nodeData) {
    if (!nodeData.name.startsWith("EriDiffusion_")) return;
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
