"""What the tests (and the demo and benchmarks) build on: tiny stacks of every family, clips made
from the photos, running workflows through ComfyUI's executor, the example workflows' generator.
Nothing here is loaded when ComfyUI registers EriDiffusion's nodes."""
