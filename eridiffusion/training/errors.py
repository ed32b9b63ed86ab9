"""The one exception type EriDiffusion raises for bad input: its message names the input and the fix."""


class EriDiffusionError(ValueError):
    pass
