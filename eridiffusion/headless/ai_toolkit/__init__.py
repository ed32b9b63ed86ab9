"""ai-toolkit's config format read as EriDiffusion's sections (sections.py), with its training and
sampling keys (training.py) and the tables between the two (translation.py)."""

from .sections import is_ai_toolkit, translate

__all__ = ["is_ai_toolkit", "translate"]
