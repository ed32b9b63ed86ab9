"""ComfyUI nodes: thin wrappers that validate inputs, build a config and call the training core."""
