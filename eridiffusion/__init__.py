"""EriDiffusion: train LoRA-family adapters inside the ComfyUI graph (`nodes`), on the training
core in `training`. Importing this package touches nothing of ComfyUI."""

from .version import __version__  # noqa: F401
