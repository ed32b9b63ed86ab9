"""Sample rendering: the prompts, their inputs and the images, clips and sounds drawn during training."""
