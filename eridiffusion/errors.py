"""The one exception type EriDiffusion raises for bad input: its message names the input and the fix."""


class EriDiffusionError(ValueError):
    pass


def first_line(error):
    """The first line of an exception's message (its type's name where it has none), to quote in ours."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
