"""Tiny random-init stacks of the video families newer ComfyUI versions added (0.2x), built from
ComfyUI's own classes; see tiny_models. Each TinyFamily names the classes it needs, so on a host
without them its tests are skipped with that reason."""
FAMILIES = {}
