"""Training from a config file, without a browser: `eridiffusion train CONFIG.yaml`. The run builds
what a graph of EriDiffusion's nodes builds, through the same nodes and core functions."""
