"""Where the test data lives: ../shared beside the checkout when present, else the copies shipped
in demo/data (a clean CI clone has no ../shared)."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def shared_datasets():
    """../shared/datasets beside the checkout, else the copy shipped with the demo."""
    beside = os.path.join(os.path.dirname(ROOT), "shared", "datasets")
    return beside if os.path.isdir(beside) else os.path.join(ROOT, "demo", "data")


def taef2_weights():
    """The TAEF2 weights folder: ../shared/weights/taef2 beside the checkout, else the copy
    shipped with the demo (MIT, 5.4 MB)."""
    beside = os.path.join(os.path.dirname(ROOT), "shared", "weights", "taef2")
    return beside if os.path.isdir(beside) else os.path.join(ROOT, "demo", "data", "taef2")
