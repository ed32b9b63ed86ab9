"""The training core: works on ComfyUI objects and plain tensors, knows nothing of nodes or UI."""
