"""What the machine running the tests can do (GPU features some tests need)."""

import torch


def fp8_gpu():
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)
