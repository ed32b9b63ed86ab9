"""The file formats: ComfyUI's LoRA files (keys, metadata), the training-state file beside each
checkpoint, and the atomic writes every file goes through."""
