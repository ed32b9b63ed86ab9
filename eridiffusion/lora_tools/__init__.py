"""The LoRA toolbox's core: inspect, resize, merge and extract LoRA files in ComfyUI's keys. Nodes and
the command line (`eridiffusion lora <verb>`) are thin faces over these functions."""
